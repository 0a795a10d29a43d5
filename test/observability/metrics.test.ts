import { afterEach, describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/observability/metrics.js';
import { PipelineEvents } from '../../src/core/events.js';
import type { SinkJobCounts } from '../../src/queue/queue.js';
import type { SinkPositionView } from '../../src/queue/sink-positions.js';
import { metricFamilies, parseSamples, sampleValue, type Sample } from './prom-text.js';
import { promtool } from './promtool.js';
import { startStack } from './stack.js';

type Stack = Awaited<ReturnType<typeof startStack>>;
let stack: Stack | undefined;
afterEach(async () => {
  await stack?.close();
  stack = undefined;
});

function counts(waiting: number, dead: number): SinkJobCounts {
  return { waiting, active: 1, delayed: 2, failed: 3, dead };
}

/** A sink's position in a source, live unless told otherwise. */
function view(source: string, sink: string, over: Partial<SinkPositionView> = {}): SinkPositionView {
  return {
    source,
    sink,
    state: 'live',
    position: 500,
    lagEvents: 0,
    lagSeconds: null,
    queued: 0,
    reason: null,
    since: null,
    pendingIds: 0,
    idsTruncated: false,
    lostUpstream: 0,
    ...over,
  };
}

const PAIRS = [
  { source: 'scheduling', sink: 'file' },
  { source: 'scheduling', sink: 'hook' },
  { source: 'workflow', sink: 'file' },
];

async function scrape(s: Stack): Promise<{ text: string; samples: Sample[] }> {
  const res = await s.get('/metrics');
  expect(res.status).toBe(200);
  expect(res.contentType).toMatch(/^text\/plain; version=0\.0\.4/);
  return { text: res.body, samples: parseSamples(res.body) };
}

function emitScript(s: Stack): void {
  const { events } = s;
  for (let i = 0; i < 3; i++)
    events.emit('http:response', { source: 'scheduling', kind: 'feed', code: '200' });
  for (let i = 0; i < 2; i++)
    events.emit('http:response', { source: 'scheduling', kind: 'subject', code: '404' });
  events.emit('http:response', { source: 'workflow', kind: 'feed', code: '503' });

  events.emit('poll:finished', {
    source: 'scheduling',
    ok: true,
    durationSeconds: 0.2,
    pageSize: 50,
    behind: true,
  });
  events.emit('page:committed', {
    source: 'scheduling',
    cursor: 123459,
    eventTypes: ['title_updated', 'title_updated', 'scheduling_created'],
    lastEventTimestamp: 1795000000,
    enqueued: { file: 3, hook: 2 },
    gone: 1,
  });
  events.emit('poll:finished', {
    source: 'scheduling',
    ok: true,
    durationSeconds: 0.03,
    pageSize: 1,
    behind: false,
  });
  events.emit('page:committed', {
    source: 'scheduling',
    cursor: 123460,
    eventTypes: ['title_deleted'],
    lastEventTimestamp: 1795000100,
    enqueued: { file: 1, hook: 1 },
    gone: 1,
  });
  for (let i = 0; i < 2; i++) {
    events.emit('poll:finished', {
      source: 'workflow',
      ok: false,
      durationSeconds: 1.5,
      pageSize: 0,
      behind: false,
      error: new Error('HTTP 503 on GET http://u:pw@127.0.0.1/workflow/api/events'),
    });
  }
  for (let i = 0; i < 4; i++) {
    events.emit('delivery:finished', {
      sink: 'file',
      outcome: 'ok',
      durationSeconds: 0.002,
      changes: [{ key: `scheduling:${123457 + i}`, endToEndSeconds: 0.7 }],
    });
  }
  events.emit('delivery:finished', {
    sink: 'hook',
    outcome: 'ok',
    durationSeconds: 0.3,
    changes: [{ key: 'scheduling:123457', endToEndSeconds: 45 }],
  });
  for (let i = 0; i < 2; i++) {
    events.emit('delivery:finished', {
      sink: 'hook',
      outcome: 'retry',
      durationSeconds: 2,
      changes: [{ key: 'scheduling:123458' }],
    });
  }
  events.emit('delivery:finished', {
    sink: 'hook',
    outcome: 'dead',
    durationSeconds: 2,
    changes: [{ key: 'scheduling:123458' }],
  });
}

describe('metrics over /metrics', () => {
  it('counts a scripted sequence of pipeline events exactly', async () => {
    stack = await startStack();
    const before = Date.now() / 1000;
    emitScript(stack);
    const { samples } = await scrape(stack);
    const v = (name: string, labels: Record<string, string> = {}) => sampleValue(samples, name, labels);

    expect(v('feedsync_build_info', { version: '1.2.3-test' })).toBe(1);
    expect(v('feedsync_http_requests_total', { source: 'scheduling', kind: 'feed', code: '200' })).toBe(3);
    expect(v('feedsync_http_requests_total', { source: 'scheduling', kind: 'subject', code: '404' })).toBe(2);
    expect(v('feedsync_http_requests_total', { source: 'workflow', kind: 'feed', code: '503' })).toBe(1);

    expect(v('feedsync_events_total', { source: 'scheduling', event_type: 'title_updated' })).toBe(2);
    expect(v('feedsync_events_total', { source: 'scheduling', event_type: 'scheduling_created' })).toBe(1);
    expect(v('feedsync_events_total', { source: 'scheduling', event_type: 'title_deleted' })).toBe(1);
    expect(v('feedsync_subject_gone_total', { source: 'scheduling' })).toBe(2);
    expect(v('feedsync_subject_gone_total', { source: 'workflow' })).toBe(0);
    expect(v('feedsync_cursor_event_id', { source: 'scheduling' })).toBe(123460);
    expect(v('feedsync_last_event_timestamp_seconds', { source: 'scheduling' })).toBe(1795000100);
    expect(v('feedsync_changes_enqueued_total', { source: 'scheduling', sink: 'file' })).toBe(4);
    expect(v('feedsync_changes_enqueued_total', { source: 'scheduling', sink: 'hook' })).toBe(3);
    expect(v('feedsync_changes_enqueued_total', { source: 'workflow', sink: 'hook' })).toBe(0);

    expect(v('feedsync_polls_total', { source: 'scheduling', outcome: 'ok' })).toBe(2);
    expect(v('feedsync_polls_total', { source: 'scheduling', outcome: 'error' })).toBe(0);
    expect(v('feedsync_polls_total', { source: 'workflow', outcome: 'error' })).toBe(2);
    expect(v('feedsync_polls_total', { source: 'workflow', outcome: 'ok' })).toBe(0);
    expect(v('feedsync_poll_duration_seconds_count', { source: 'scheduling' })).toBe(2);
    expect(v('feedsync_poll_duration_seconds_sum', { source: 'scheduling' })).toBeCloseTo(0.23, 9);
    expect(v('feedsync_poll_duration_seconds_bucket', { source: 'scheduling', le: '0.05' })).toBe(1);
    expect(v('feedsync_poll_duration_seconds_bucket', { source: 'workflow', le: '1' })).toBe(0);
    expect(v('feedsync_poll_duration_seconds_bucket', { source: 'workflow', le: '2.5' })).toBe(2);
    expect(v('feedsync_source_behind', { source: 'scheduling' })).toBe(0);
    const lastOk = v('feedsync_last_successful_poll_timestamp_seconds', { source: 'scheduling' });
    expect(lastOk).toBeGreaterThanOrEqual(Math.floor(before));
    expect(lastOk).toBeLessThanOrEqual(Date.now() / 1000);
    // Never succeeded: the gauge must not pretend it did.
    expect(
      samples.some(
        (s) => s.name === 'feedsync_last_successful_poll_timestamp_seconds' && s.labels.source === 'workflow',
      ),
    ).toBe(false);

    expect(v('feedsync_deliveries_total', { sink: 'file', outcome: 'ok' })).toBe(4);
    expect(v('feedsync_deliveries_total', { sink: 'file', outcome: 'retry' })).toBe(0);
    expect(v('feedsync_deliveries_total', { sink: 'file', outcome: 'dead' })).toBe(0);
    expect(v('feedsync_deliveries_total', { sink: 'hook', outcome: 'ok' })).toBe(1);
    expect(v('feedsync_deliveries_total', { sink: 'hook', outcome: 'retry' })).toBe(2);
    expect(v('feedsync_deliveries_total', { sink: 'hook', outcome: 'dead' })).toBe(1);
    expect(v('feedsync_delivery_duration_seconds_count', { sink: 'hook' })).toBe(4);
    expect(v('feedsync_delivery_duration_seconds_bucket', { sink: 'file', le: '0.0025' })).toBe(4);
    expect(v('feedsync_end_to_end_seconds_count', { sink: 'file' })).toBe(4);
    expect(v('feedsync_end_to_end_seconds_count', { sink: 'hook' })).toBe(1);
    expect(v('feedsync_end_to_end_seconds_bucket', { sink: 'hook', le: '30' })).toBe(0);
    expect(v('feedsync_end_to_end_seconds_bucket', { sink: 'hook', le: '60' })).toBe(1);

    // Low cardinality: no label carries an id, a key or a URL.
    for (const s of samples.filter((x) => x.name.startsWith('feedsync_'))) {
      for (const value of Object.values(s.labels)) {
        expect(value, `${s.name} ${JSON.stringify(s.labels)}`).not.toMatch(/:\/\/|\d{5,}|scheduling:\d/);
      }
    }
  });

  it('counts every change of a batch call, times the call once, and the end-to-end latency per change', async () => {
    stack = await startStack();
    stack.events.emit('delivery:finished', {
      sink: 'file',
      outcome: 'ok',
      durationSeconds: 0.004,
      changes: [
        { key: 'scheduling:1', endToEndSeconds: 0.2 },
        { key: 'scheduling:2', endToEndSeconds: 40 },
        { key: 'scheduling:3' },
      ],
    });
    const { samples } = await scrape(stack);
    const v = (name: string, labels: Record<string, string> = {}) => sampleValue(samples, name, labels);
    expect(v('feedsync_deliveries_total', { sink: 'file', outcome: 'ok' })).toBe(3);
    expect(v('feedsync_delivery_duration_seconds_count', { sink: 'file' })).toBe(1);
    expect(v('feedsync_delivery_duration_seconds_sum', { sink: 'file' })).toBeCloseTo(0.004, 9);
    // The change whose occurred_at did not parse has no latency to observe.
    expect(v('feedsync_end_to_end_seconds_count', { sink: 'file' })).toBe(2);
    expect(v('feedsync_end_to_end_seconds_bucket', { sink: 'file', le: '30' })).toBe(1);
  });

  it('shows the behind flag of the latest successful poll', async () => {
    stack = await startStack();
    stack.events.emit('poll:finished', {
      source: 'workflow',
      ok: true,
      durationSeconds: 0.1,
      pageSize: 50,
      behind: true,
    });
    let { samples } = await scrape(stack);
    expect(sampleValue(samples, 'feedsync_source_behind', { source: 'workflow' })).toBe(1);
    expect(sampleValue(samples, 'feedsync_source_behind', { source: 'scheduling' })).toBe(0);
    // Configured label sets exist before anything happened, so rate() sees the first increment.
    expect(sampleValue(samples, 'feedsync_poll_duration_seconds_count', { source: 'scheduling' })).toBe(0);
    expect(sampleValue(samples, 'feedsync_end_to_end_seconds_count', { sink: 'file' })).toBe(0);
    expect(sampleValue(samples, 'feedsync_delivery_duration_seconds_count', { sink: 'hook' })).toBe(0);
    stack.events.emit('poll:finished', {
      source: 'workflow',
      ok: true,
      durationSeconds: 0.1,
      pageSize: 3,
      behind: false,
    });
    ({ samples } = await scrape(stack));
    expect(sampleValue(samples, 'feedsync_source_behind', { source: 'workflow' })).toBe(0);
  });

  it('reads queue gauges at scrape time, caches them for a second and keeps the last values on error', async () => {
    let calls = 0;
    let fail = false;
    stack = await startStack({
      queueCounts: async () => {
        calls++;
        if (fail) throw new Error('connect ECONNREFUSED redis://:hunter2@127.0.0.1:6379');
        return { file: counts(5, 0), hook: counts(calls * 10, 7) };
      },
    });
    let { samples } = await scrape(stack);
    expect(calls).toBe(1);
    expect(sampleValue(samples, 'feedsync_queue_jobs', { sink: 'file', state: 'waiting' })).toBe(5);
    expect(sampleValue(samples, 'feedsync_queue_jobs', { sink: 'hook', state: 'waiting' })).toBe(10);
    expect(sampleValue(samples, 'feedsync_queue_jobs', { sink: 'hook', state: 'active' })).toBe(1);
    expect(sampleValue(samples, 'feedsync_queue_jobs', { sink: 'hook', state: 'delayed' })).toBe(2);
    expect(sampleValue(samples, 'feedsync_queue_jobs', { sink: 'hook', state: 'failed' })).toBe(3);
    expect(sampleValue(samples, 'feedsync_dead_letters', { sink: 'hook' })).toBe(7);
    expect(sampleValue(samples, 'feedsync_dead_letters', { sink: 'file' })).toBe(0);

    await scrape(stack);
    expect(calls).toBe(1);

    fail = true;
    await new Promise((r) => setTimeout(r, 1100));
    ({ samples } = await scrape(stack));
    expect(calls).toBe(2);
    expect(sampleValue(samples, 'feedsync_queue_jobs', { sink: 'hook', state: 'waiting' })).toBe(10);
    expect(sampleValue(samples, 'feedsync_dead_letters', { sink: 'hook' })).toBe(7);

    fail = false;
    await new Promise((r) => setTimeout(r, 1100));
    ({ samples } = await scrape(stack));
    expect(calls).toBe(3);
    expect(sampleValue(samples, 'feedsync_queue_jobs', { sink: 'hook', state: 'waiting' })).toBe(30);
  });

  it('stops counting after close()', async () => {
    const events = new PipelineEvents();
    const metrics = createMetrics({ events, sources: ['a'], sinks: ['s'], version: 'x' });
    events.emit('poll:finished', { source: 'a', ok: true, durationSeconds: 0.1, pageSize: 1, behind: false });
    metrics.close();
    events.emit('poll:finished', { source: 'a', ok: true, durationSeconds: 0.1, pageSize: 1, behind: false });
    const samples = parseSamples(await metrics.registry.metrics());
    expect(sampleValue(samples, 'feedsync_polls_total', { source: 'a', outcome: 'ok' })).toBe(1);
  });

  it('counts redis:error events by kind, every kind from 0 when the process talks to Redis', async () => {
    const events = new PipelineEvents();
    const metrics = createMetrics({ events, sources: [], sinks: [], version: 'x', redis: true });
    events.emit('redis:error', { kind: 'noperm' });
    events.emit('redis:error', { kind: 'noperm' });
    events.emit('redis:error', { kind: 'unreachable' });
    const text = await metrics.registry.metrics();
    metrics.close();
    const samples = parseSamples(text);
    expect(metricFamilies(text).get('feedsync_redis_errors_total')).toBe('counter');
    expect(sampleValue(samples, 'feedsync_redis_errors_total', { kind: 'noperm' })).toBe(2);
    expect(sampleValue(samples, 'feedsync_redis_errors_total', { kind: 'unreachable' })).toBe(1);
    for (const kind of ['wrongpass', 'moved', 'readonly', 'tls', 'other'])
      expect(sampleValue(samples, 'feedsync_redis_errors_total', { kind }), kind).toBe(0);
    const check = promtool(['check', 'metrics'], text);
    expect(check.output).toBe('');
  });

  it('declares every README metric with its type and passes promtool check metrics', async () => {
    stack = await startStack({
      queueCounts: async () => ({ file: counts(1, 1), hook: counts(2, 2) }),
      sinkPositions: async () => [
        view('scheduling', 'file'),
        view('scheduling', 'hook', { state: 'parked', lagSeconds: 12.5, reason: 'parked', since: 1 }),
      ],
      sinkPairs: PAIRS,
    });
    emitScript(stack);
    stack.events.emit('sink:parked', { source: 'scheduling', sink: 'hook' });
    const { text } = await scrape(stack);
    const families = metricFamilies(text);
    const expected: Record<string, string> = {
      feedsync_events_total: 'counter',
      feedsync_polls_total: 'counter',
      feedsync_poll_duration_seconds: 'histogram',
      feedsync_http_requests_total: 'counter',
      feedsync_subject_gone_total: 'counter',
      feedsync_cursor_event_id: 'gauge',
      feedsync_last_event_timestamp_seconds: 'gauge',
      feedsync_last_successful_poll_timestamp_seconds: 'gauge',
      feedsync_source_behind: 'gauge',
      feedsync_changes_enqueued_total: 'counter',
      feedsync_deliveries_total: 'counter',
      feedsync_delivery_duration_seconds: 'histogram',
      feedsync_end_to_end_seconds: 'histogram',
      feedsync_queue_jobs: 'gauge',
      feedsync_dead_letters: 'gauge',
      feedsync_sink_failing: 'gauge',
      feedsync_sink_probes_total: 'counter',
      feedsync_sink_position: 'gauge',
      feedsync_sink_lag_events: 'gauge',
      feedsync_sink_lag_seconds: 'gauge',
      feedsync_sink_state: 'gauge',
      feedsync_sink_pending_ids: 'gauge',
      feedsync_sink_lost_upstream: 'gauge',
      feedsync_sink_parked_total: 'counter',
      feedsync_catchup_changes_total: 'counter',
      feedsync_sink_rejoined_total: 'counter',
      feedsync_build_info: 'gauge',
      process_cpu_seconds_total: 'counter',
      process_start_time_seconds: 'gauge',
      nodejs_eventloop_lag_seconds: 'gauge',
    };
    for (const [name, type] of Object.entries(expected)) expect(families.get(name), name).toBe(type);

    const check = promtool(['check', 'metrics'], text);
    expect(check.output).toBe('');
    expect(check.code).toBe(0);
  });
});

describe('sink positions', () => {
  it('reads each (source, sink) position at scrape time with the queue counts, one state at 1 of four', async () => {
    let reads = 0;
    const seen: unknown[] = [];
    stack = await startStack({
      queueCounts: async () => ({ file: counts(5, 0), hook: counts(300, 0) }),
      sinkPositions: async (c) => {
        reads++;
        seen.push(c);
        return [
          view('scheduling', 'file', { position: 900, lagEvents: 8 }),
          view('scheduling', 'hook', {
            state: 'parked',
            position: 420,
            lagEvents: 780,
            lagSeconds: 95.5,
            queued: 300,
            reason: 'parked',
            since: 1,
            pendingIds: 480,
            lostUpstream: 2,
          }),
          view('workflow', 'file', {
            state: 'catching_up',
            position: null,
            lagEvents: null,
            reason: 'backfill',
          }),
        ];
      },
      sinkPairs: PAIRS,
    });
    let { samples } = await scrape(stack);
    const v = (name: string, labels: Record<string, string>) => sampleValue(samples, name, labels);
    expect(reads).toBe(1);
    // The counts feedsync_queue_jobs read are handed over, not read a second time.
    expect(seen[0]).toMatchObject({ hook: { waiting: 300 } });
    expect(v('feedsync_sink_position', { source: 'scheduling', sink: 'file' })).toBe(900);
    expect(v('feedsync_sink_position', { source: 'scheduling', sink: 'hook' })).toBe(420);
    expect(v('feedsync_sink_position', { source: 'workflow', sink: 'file' })).toBe(0); // no cursor yet
    expect(v('feedsync_sink_lag_events', { source: 'scheduling', sink: 'hook' })).toBe(780);
    expect(v('feedsync_sink_lag_events', { source: 'workflow', sink: 'file' })).toBe(0);
    expect(v('feedsync_sink_lag_seconds', { source: 'scheduling', sink: 'hook' })).toBe(95.5);
    expect(v('feedsync_sink_lag_seconds', { source: 'scheduling', sink: 'file' })).toBe(0);
    expect(v('feedsync_sink_pending_ids', { source: 'scheduling', sink: 'hook' })).toBe(480);
    expect(v('feedsync_sink_lost_upstream', { source: 'scheduling', sink: 'hook' })).toBe(2);
    const states = (source: string, sink: string) =>
      Object.fromEntries(
        ['live', 'failing', 'parked', 'catching_up'].map((state) => [
          state,
          v('feedsync_sink_state', { source, sink, state }),
        ]),
      );
    expect(states('scheduling', 'hook')).toEqual({ live: 0, failing: 0, parked: 1, catching_up: 0 });
    expect(states('scheduling', 'file')).toEqual({ live: 1, failing: 0, parked: 0, catching_up: 0 });
    expect(states('workflow', 'file')).toEqual({ live: 0, failing: 0, parked: 0, catching_up: 1 });
    // Bounded: the four states and the configured pairs, nothing else (no reason, no id).
    const series = samples.filter((s) => s.name === 'feedsync_sink_state');
    expect(series).toHaveLength(PAIRS.length * 4);
    for (const s of series) expect(Object.keys(s.labels).sort()).toEqual(['sink', 'source', 'state']);

    ({ samples } = await scrape(stack));
    expect(reads).toBe(1); // cached for a second
  });

  it('counts parkings, catch-up changes and rejoins per (source, sink), from 0 for the pairs a poller has', async () => {
    stack = await startStack({ sources: ['scheduling'], sinkPairs: PAIRS });
    let { samples } = await scrape(stack);
    const v = (name: string, labels: Record<string, string>) => sampleValue(samples, name, labels);
    for (const name of [
      'feedsync_sink_parked_total',
      'feedsync_catchup_changes_total',
      'feedsync_sink_rejoined_total',
    ]) {
      expect(v(name, { source: 'scheduling', sink: 'file' })).toBe(0);
      expect(v(name, { source: 'scheduling', sink: 'hook' })).toBe(0);
      // workflow is not polled by this process: nothing can count there.
      expect(samples.some((s) => s.name === name && s.labels.source === 'workflow')).toBe(false);
    }
    // No positions reader: no position gauges with made-up values.
    expect(samples.some((s) => s.name === 'feedsync_sink_state')).toBe(false);

    const { events } = stack;
    events.emit('sink:parked', { source: 'scheduling', sink: 'hook' });
    events.emit('catchup:committed', {
      source: 'scheduling',
      sink: 'hook',
      queued: 50,
      joined: false,
      lost: 0,
    });
    events.emit('catchup:committed', {
      source: 'scheduling',
      sink: 'hook',
      queued: 7,
      joined: true,
      lost: 2,
    });
    events.emit('sink:parked', { source: 'scheduling', sink: 'hook' });
    ({ samples } = await scrape(stack));
    const w = (name: string, labels: Record<string, string>) => sampleValue(samples, name, labels);
    expect(w('feedsync_sink_parked_total', { source: 'scheduling', sink: 'hook' })).toBe(2);
    expect(w('feedsync_catchup_changes_total', { source: 'scheduling', sink: 'hook' })).toBe(57);
    expect(w('feedsync_sink_rejoined_total', { source: 'scheduling', sink: 'hook' })).toBe(1);
    expect(w('feedsync_sink_parked_total', { source: 'scheduling', sink: 'file' })).toBe(0);
    expect(v('feedsync_sink_rejoined_total', { source: 'scheduling', sink: 'file' })).toBe(0);
  });

  it('keeps the last positions while they cannot be read', async () => {
    let fail = false;
    stack = await startStack({
      sinkPositions: async () => {
        if (fail) throw new Error('connect ECONNREFUSED');
        return [view('scheduling', 'hook', { state: 'failing', position: 77 })];
      },
      sinkPairs: [{ source: 'scheduling', sink: 'hook' }],
    });
    let { samples } = await scrape(stack);
    expect(
      sampleValue(samples, 'feedsync_sink_state', { source: 'scheduling', sink: 'hook', state: 'failing' }),
    ).toBe(1);
    fail = true;
    await new Promise((r) => setTimeout(r, 1100));
    ({ samples } = await scrape(stack));
    expect(sampleValue(samples, 'feedsync_sink_position', { source: 'scheduling', sink: 'hook' })).toBe(77);
    expect(
      sampleValue(samples, 'feedsync_sink_state', { source: 'scheduling', sink: 'hook', state: 'failing' }),
    ).toBe(1);
  });
});

describe('sink health', () => {
  it("reports each sink's own healthy() as feedsync_sink_healthy, 1 or 0", async () => {
    const events = new PipelineEvents();
    const metrics = createMetrics({
      events,
      sources: [],
      sinks: ['mirror', 'hook'],
      version: 'x',
      sinkHealth: async () => ({ mirror: true, hook: false }),
    });
    const samples = parseSamples(await metrics.registry.metrics());
    expect(sampleValue(samples, 'feedsync_sink_healthy', { sink: 'mirror' })).toBe(1);
    expect(sampleValue(samples, 'feedsync_sink_healthy', { sink: 'hook' })).toBe(0);
    metrics.close();
  });
});
