// Every metric of docs/operating.md "Metrics", on one dedicated registry. Metrics are fed only by subscribing
// to PipelineEvents (the pipeline never calls a metric directly); queue gauges are read at
// scrape time from the queue's own counts.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { REFUSAL_REASONS } from '../core/errors.js';
import {
  FEED_ANOMALY_KINDS,
  PAGE_LIMITS,
  REDIS_ERROR_KINDS,
  UNDECODABLE_ACTIONS,
  type PipelineEvents,
} from '../core/events.js';
import type { SinkJobCounts } from '../queue/queue.js';
import { SINK_STATES, type SinkPositionView } from '../queue/sink-positions.js';
import type { Logger } from './logger.js';
import { createCountsCache, createScrapeCache } from './queue-counts-cache.js';

export interface MetricsOptions {
  events: PipelineEvents;
  /** Configured source names: their label sets start at 0 so rate() and absence alerts work. */
  sources: string[];
  /** Configured sink names. */
  sinks: string[];
  version: string;
  /** Queue counts per sink, asked at scrape time (cached ~1 s). */
  queueCounts?: () => Promise<Record<string, SinkJobCounts>>;
  /** Sources this process polls now (it holds their lease); asked at scrape time. */
  leading?: () => string[];
  /** Each delivering sink's own health (its `healthy()`), asked at scrape time. */
  sinkHealth?: () => Promise<Record<string, boolean>>;
  /**
   * Every (source, sink) position (observability/sink-positions-view.ts), asked at scrape time
   * (cached ~1 s) with the queue counts just read for feedsync_queue_jobs, when there are any.
   */
  sinkPositions?: (counts: Record<string, SinkJobCounts> | undefined) => Promise<SinkPositionView[]>;
  /**
   * The configured (source, sink) pairs the sink's filter lets through: the parking and catch-up
   * counters start at 0 for those whose source is in `sources` (this process polls it).
   */
  sinkPairs?: { source: string; sink: string }[];
  /** The process talks to Redis (bullmq driver): feedsync_redis_errors_total starts at 0 per kind. */
  redis?: boolean;
  logger?: Logger;
}

export interface Metrics {
  registry: Registry;
  /** Unsubscribes from the events; the registry keeps its last values. */
  close(): void;
}

const POLL_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
const DELIVERY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const END_TO_END_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];
const QUEUE_STATES = ['waiting', 'active', 'delayed', 'failed'] as const;
const DELIVERY_OUTCOMES = ['ok', 'retry', 'dead'] as const;

// prom-client's default metrics include gauges named *_total, which `promtool check metrics`
// rejects (only counters may end in _total). Their per-type siblings without the suffix carry
// the same information (sum them), so these three are dropped.
const NON_CONFORMING_DEFAULTS = [
  'nodejs_active_handles_total',
  'nodejs_active_requests_total',
  'nodejs_active_resources_total',
];

export function createMetrics(opts: MetricsOptions): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  for (const name of NON_CONFORMING_DEFAULTS) registry.removeSingleMetric(name);
  const registers = [registry];

  const buildInfo = new Gauge({
    name: 'feedsync_build_info',
    help: 'Always 1; the version label identifies the running build.',
    labelNames: ['version'] as const,
    registers,
  });
  buildInfo.set({ version: opts.version }, 1);

  const eventsTotal = new Counter({
    name: 'feedsync_events_total',
    help: 'Feed events turned into changes and committed, by source and event type.',
    labelNames: ['source', 'event_type'] as const,
    registers,
  });
  const pollsTotal = new Counter({
    name: 'feedsync_polls_total',
    help: 'Feed polls finished, by outcome (ok, error).',
    labelNames: ['source', 'outcome'] as const,
    registers,
  });
  const pollDuration = new Histogram({
    name: 'feedsync_poll_duration_seconds',
    help: 'Duration of one poll: fetch a feed page, expand it and commit it.',
    labelNames: ['source'] as const,
    buckets: POLL_BUCKETS,
    registers,
  });
  const httpRequests = new Counter({
    name: 'feedsync_http_requests_total',
    help: 'HTTP exchanges with the upstream services, by request kind (feed, subject) and status code.',
    labelNames: ['source', 'kind', 'code'] as const,
    registers,
  });
  const subjectGone = new Counter({
    name: 'feedsync_subject_gone_total',
    help: 'Subjects that answered 404 when fetched (changes emitted with subject_state gone).',
    labelNames: ['source'] as const,
    registers,
  });
  const refusals = new Counter({
    name: 'feedsync_upstream_refusals_total',
    help: 'Upstream bodies, links and feed events refused (over a size, depth or value limit; another origin; unusable; an event id or timestamp feedsync cannot take), by reason.',
    labelNames: ['source', 'reason'] as const,
    registers,
  });
  const pageRefusals = new Counter({
    name: 'feedsync_page_refusals_total',
    help: 'Feed pages refused for a memory limit of their source (reason: max_page_bytes, max_change_bytes); the page is retried, the cursor stays.',
    labelNames: ['source', 'reason'] as const,
    registers,
  });
  const undecodable = new Counter({
    name: 'feedsync_undecodable_subjects_total',
    help: 'Subjects that can never be decoded: stopped (the source stops on the event; once per retry) or delivered_unreadable (changes delivered with subject_state unreadable).',
    labelNames: ['source', 'action'] as const,
    registers,
  });
  const invalidUtf8 = new Counter({
    name: 'feedsync_upstream_invalid_utf8_total',
    help: 'Upstream responses holding bytes that are not valid UTF-8 (replaced by U+FFFD).',
    labelNames: ['source'] as const,
    registers,
  });
  const anomalies = new Counter({
    name: 'feedsync_feed_anomalies_total',
    help: 'Feed events that broke a rule the cursor relies on (duplicate_id, behind_cursor, disorder: each still delivered once; relisted_changed: listed again with other contents, the change queued first kept).',
    labelNames: ['source', 'kind'] as const,
    registers,
  });
  const cursorEventId = new Gauge({
    name: 'feedsync_cursor_event_id',
    help: 'The saved cursor (last committed event id) per source.',
    labelNames: ['source'] as const,
    registers,
  });
  const lastEventTimestamp = new Gauge({
    name: 'feedsync_last_event_timestamp_seconds',
    help: 'occurred_at of the newest committed event per source, Unix seconds.',
    labelNames: ['source'] as const,
    registers,
  });
  const lastSuccessfulPoll = new Gauge({
    name: 'feedsync_last_successful_poll_timestamp_seconds',
    help: 'When the last successful poll of each source finished, Unix seconds.',
    labelNames: ['source'] as const,
    registers,
  });
  const sourceBehind = new Gauge({
    name: 'feedsync_source_behind',
    help: '1 when the last page of the source was full (more events are waiting upstream), else 0.',
    labelNames: ['source'] as const,
    registers,
  });
  const leading = opts.leading;
  new Gauge({
    name: 'feedsync_source_leader',
    help: '1 on the process that holds the source (polls it), else 0; with standby pollers one replica has 1.',
    labelNames: ['source'] as const,
    registers,
    collect() {
      if (!leading) return;
      const held = new Set(leading());
      for (const source of opts.sources) this.set({ source }, held.has(source) ? 1 : 0);
    },
  });
  const sinkHealth = opts.sinkHealth;
  new Gauge({
    name: 'feedsync_sink_healthy',
    help: "1 while the sink says it can accept deliveries (its healthy()), else 0; one sink's trouble never fails /readyz.",
    labelNames: ['sink'] as const,
    registers,
    async collect() {
      if (!sinkHealth) return;
      for (const [sink, ok] of Object.entries(await sinkHealth())) this.set({ sink }, ok ? 1 : 0);
    },
  });
  const sinkProbes = new Counter({
    name: 'feedsync_sink_probes_total',
    help: 'Calls let through to a failing sink, one at a time, to see whether it answers again, by outcome (ok, failed).',
    labelNames: ['sink', 'outcome'] as const,
    registers,
  });
  const sinkFailing = new Gauge({
    name: 'feedsync_sink_failing',
    help: "1 while this process holds a failing sink's deliveries back (only probes reach it), else 0.",
    labelNames: ['sink'] as const,
    registers,
  });
  const changesEnqueued = new Counter({
    name: 'feedsync_changes_enqueued_total',
    help: 'Changes durably queued, by source and sink.',
    labelNames: ['source', 'sink'] as const,
    registers,
  });
  const deliveriesTotal = new Counter({
    name: 'feedsync_deliveries_total',
    help: 'Delivery attempts to sinks, by outcome (ok, retry, dead).',
    labelNames: ['sink', 'outcome'] as const,
    registers,
  });
  const afterLeaseLoss = new Counter({
    name: 'feedsync_deliveries_after_lease_loss_total',
    help: 'Changes a sink received from a delivery that finished after this process lost its lease (the new owner delivers them again).',
    labelNames: ['sink'] as const,
    registers,
  });
  const deliveryDuration = new Histogram({
    name: 'feedsync_delivery_duration_seconds',
    help: 'Duration of one delivery attempt to a sink.',
    labelNames: ['sink'] as const,
    buckets: DELIVERY_BUCKETS,
    registers,
  });
  const endToEnd = new Histogram({
    name: 'feedsync_end_to_end_seconds',
    help: 'From the event occurred_at to the sink acknowledging the change.',
    labelNames: ['sink'] as const,
    buckets: END_TO_END_BUCKETS,
    registers,
  });

  const redisErrors = new Counter({
    name: 'feedsync_redis_errors_total',
    help: 'Redis connection and command failures (bullmq driver), by kind: wrongpass, noperm, moved, readonly, unreachable, tls, other.',
    labelNames: ['kind'] as const,
    registers,
  });
  if (opts.redis) for (const kind of REDIS_ERROR_KINDS) redisErrors.inc({ kind }, 0);

  const counts = opts.queueCounts ? createCountsCache(opts.queueCounts, 1000, opts.logger) : undefined;
  const queueJobs = new Gauge({
    name: 'feedsync_queue_jobs',
    help: 'Queued deliveries per sink, by state (waiting, active, delayed, failed).',
    labelNames: ['sink', 'state'] as const,
    registers,
    async collect() {
      const current = await counts?.get();
      if (!current) return;
      for (const [sink, c] of Object.entries(current)) {
        for (const state of QUEUE_STATES) this.set({ sink, state }, c[state]);
      }
    },
  });
  const deadLetters = new Gauge({
    name: 'feedsync_dead_letters',
    help: 'Changes in the dead-letter list of each sink.',
    labelNames: ['sink'] as const,
    registers,
    async collect() {
      const current = await counts?.get();
      if (!current) return;
      for (const [sink, c] of Object.entries(current)) this.set({ sink }, c.dead);
    },
  });

  // Per (source, sink) positions (docs/sink-positions.md): read at scrape time like the queue
  // counts, and with them. Gauges for every (source, sink) pair, in every process that has the
  // driver; the counters are fed by the source's poller (parking and catch-up happen there).
  const readPositions = opts.sinkPositions;
  const positions = readPositions
    ? createScrapeCache(async () => readPositions(await counts?.get()), {
        ttlMs: 1000,
        logger: opts.logger,
        what: 'sink positions',
      })
    : undefined;
  /** One gauge per (source, sink) with one number of its position view (null: 0). */
  const positionGauge = (name: string, help: string, value: (v: SinkPositionView) => number | null): void => {
    new Gauge({
      name,
      help,
      labelNames: ['source', 'sink'] as const,
      registers,
      async collect() {
        const current = await positions?.get();
        if (!current) return;
        for (const v of current) this.set({ source: v.source, sink: v.sink }, value(v) ?? 0);
      },
    });
  };
  positionGauge(
    'feedsync_sink_position',
    "The event id each sink has reached in each source's feed (on the shared stream: the source's cursor; 0 before the first one).",
    (v) => v.position,
  );
  positionGauge(
    'feedsync_sink_lag_events',
    'About how many events each sink is behind in each source: ids between its position and the cursor, plus its undelivered queued changes.',
    (v) => v.lagEvents,
  );
  positionGauge(
    'feedsync_sink_lag_seconds',
    "Age of the newest event behind a sink's own position while it is off the source's shared stream (parked or catching up); 0 on the shared stream.",
    (v) => v.lagSeconds,
  );
  positionGauge(
    'feedsync_sink_pending_ids',
    'Ids the shared poll passed while the sink was parked that its catch-up has not seen again yet.',
    (v) => v.pendingIds,
  );
  positionGauge(
    'feedsync_sink_lost_upstream',
    'Events passed while the sink was parked that the feed no longer listed when it caught up (stored count, all time).',
    (v) => v.lostUpstream,
  );
  new Gauge({
    name: 'feedsync_sink_state',
    help: 'State of each sink in each source: 1 for the current one of live, failing, parked, catching_up, 0 for the others.',
    labelNames: ['source', 'sink', 'state'] as const,
    registers,
    async collect() {
      const current = await positions?.get();
      if (!current) return;
      for (const v of current)
        for (const state of SINK_STATES)
          this.set({ source: v.source, sink: v.sink, state }, v.state === state ? 1 : 0);
    },
  });
  const sinkParked = new Counter({
    name: 'feedsync_sink_parked_total',
    help: "Times a sink reached its max_backlog and was parked: the source's shared poll went on without it.",
    labelNames: ['source', 'sink'] as const,
    registers,
  });
  const catchUpChanges = new Counter({
    name: 'feedsync_catchup_changes_total',
    help: "Changes queued for a sink by its own catch-up reader of the source's feed (after parking, a backfill or a replay).",
    labelNames: ['source', 'sink'] as const,
    registers,
  });
  const sinkRejoined = new Counter({
    name: 'feedsync_sink_rejoined_total',
    help: "Times a sink caught up and rejoined the source's shared stream.",
    labelNames: ['source', 'sink'] as const,
    registers,
  });
  // The counters start at 0 where they can count: the pairs of the sources this process polls. The
  // gauges appear with their first reading instead: a made-up 0 would read as a position, or as a
  // loss when the stored count follows (FeedsyncSinkLostUpstream alerts on its growth).
  const polled = new Set(opts.sources);
  for (const pair of opts.sinkPairs ?? []) {
    if (!polled.has(pair.source)) continue;
    sinkParked.inc(pair, 0);
    catchUpChanges.inc(pair, 0);
    sinkRejoined.inc(pair, 0);
  }

  // Known label sets start at 0: a counter that appears only on its first increment hides that
  // first increment from rate()/increase(), and alerts on "no ok poll" need the series to exist.
  for (const source of opts.sources) {
    for (const outcome of ['ok', 'error']) pollsTotal.inc({ source, outcome }, 0);
    pollDuration.zero({ source });
    subjectGone.inc({ source }, 0);
    invalidUtf8.inc({ source }, 0);
    for (const reason of REFUSAL_REASONS) refusals.inc({ source, reason }, 0);
    for (const reason of PAGE_LIMITS) pageRefusals.inc({ source, reason }, 0);
    for (const action of UNDECODABLE_ACTIONS) undecodable.inc({ source, action }, 0);
    for (const kind of FEED_ANOMALY_KINDS) anomalies.inc({ source, kind }, 0);
    sourceBehind.set({ source }, 0);
    for (const sink of opts.sinks) changesEnqueued.inc({ source, sink }, 0);
  }
  for (const sink of opts.sinks) {
    for (const outcome of DELIVERY_OUTCOMES) deliveriesTotal.inc({ sink, outcome }, 0);
    deliveryDuration.zero({ sink });
    afterLeaseLoss.inc({ sink }, 0);
    for (const outcome of ['ok', 'failed']) sinkProbes.inc({ sink, outcome }, 0);
    sinkFailing.set({ sink }, 0);
    endToEnd.zero({ sink });
    if (counts) {
      for (const state of QUEUE_STATES) queueJobs.set({ sink, state }, 0);
      deadLetters.set({ sink }, 0);
    }
  }

  const { events } = opts;
  const unsubscribers = [
    events.on('http:response', (e) => {
      httpRequests.inc({ source: e.source, kind: e.kind, code: e.code });
    }),
    events.on('delivery:after-lease-loss', (e) => afterLeaseLoss.inc({ sink: e.sink }, e.changes)),
    events.on('sink:probe', (e) => sinkProbes.inc({ sink: e.sink, outcome: e.ok ? 'ok' : 'failed' })),
    events.on('sink:failing', (e) => sinkFailing.set({ sink: e.sink }, e.failing ? 1 : 0)),
    events.on('sink:parked', (e) => sinkParked.inc({ source: e.source, sink: e.sink })),
    events.on('catchup:committed', (e) => {
      catchUpChanges.inc({ source: e.source, sink: e.sink }, e.queued);
      if (e.joined) sinkRejoined.inc({ source: e.source, sink: e.sink });
    }),
    events.on('upstream:refused', (e) => refusals.inc({ source: e.source, reason: e.reason })),
    events.on('page:refused', (e) => pageRefusals.inc({ source: e.source, reason: e.limit })),
    events.on('subject:undecodable', (e) => undecodable.inc({ source: e.source, action: e.action }, e.count)),
    events.on('upstream:invalid-utf8', (e) => invalidUtf8.inc({ source: e.source })),
    events.on('feed:anomaly', (e) => anomalies.inc({ source: e.source, kind: e.kind })),
    events.on('poll:finished', (e) => {
      pollsTotal.inc({ source: e.source, outcome: e.ok ? 'ok' : 'error' });
      if (Number.isFinite(e.durationSeconds)) pollDuration.observe({ source: e.source }, e.durationSeconds);
      if (e.ok) {
        sourceBehind.set({ source: e.source }, e.behind ? 1 : 0);
        lastSuccessfulPoll.set({ source: e.source }, Date.now() / 1000);
      }
    }),
    events.on('page:committed', (e) => {
      // One inc per event type of the page, not per event: prom-client hashes the labels per call.
      const perType = new Map<string, number>();
      for (const eventType of e.eventTypes) perType.set(eventType, (perType.get(eventType) ?? 0) + 1);
      for (const [eventType, n] of perType) eventsTotal.inc({ source: e.source, event_type: eventType }, n);
      cursorEventId.set({ source: e.source }, e.cursor);
      if (Number.isFinite(e.lastEventTimestamp)) {
        lastEventTimestamp.set({ source: e.source }, e.lastEventTimestamp as number);
      }
      for (const [sink, n] of Object.entries(e.enqueued)) {
        changesEnqueued.inc({ source: e.source, sink }, n);
      }
      subjectGone.inc({ source: e.source }, e.gone);
    }),
    events.on('redis:error', (e) => redisErrors.inc({ kind: e.kind })),
    // One event per sink call: the counter moves once by the changes it settled, the call is timed
    // once; only the end-to-end latency is per change (each has its own occurred_at).
    events.on('delivery:finished', (e) => {
      const sink = { sink: e.sink };
      deliveriesTotal.inc({ sink: e.sink, outcome: e.outcome }, e.changes.length);
      if (Number.isFinite(e.durationSeconds)) deliveryDuration.observe(sink, e.durationSeconds);
      for (const change of e.changes)
        if (Number.isFinite(change.endToEndSeconds)) endToEnd.observe(sink, change.endToEndSeconds as number);
    }),
  ];

  let closed = false;
  return {
    registry,
    close() {
      if (closed) return;
      closed = true;
      for (const off of unsubscribers) off();
    },
  };
}

/**
 * The admin listener's metrics, registered by it (src/admin/server.ts) when `admin.enabled`:
 * defined here with every other metric, and absent from /metrics when the listener is off.
 */
export function adminMetrics(registry: Registry) {
  return {
    requests: new Counter({
      name: 'feedsync_admin_requests_total',
      help: 'Requests to the admin API and console, by route and outcome',
      labelNames: ['route', 'outcome'] as const,
      registers: [registry],
    }),
    changes: new Counter({
      name: 'feedsync_admin_changes_total',
      help: 'Changes made through the admin API (dry runs not included), by action',
      labelNames: ['action'] as const,
      registers: [registry],
    }),
  };
}
