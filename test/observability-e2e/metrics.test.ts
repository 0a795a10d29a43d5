// Metrics of a real daemon after a real run against the sandbox, checked against what the sandbox
// itself counted: events per source and type, subject 404s, HTTP exchanges, deliveries, cursors.
// The same scrape must pass `promtool check metrics` and carry every metric the shipped dashboard
// and alert rules use (for a local `run` and for a bullmq `run`).
import { readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Daemon } from '../../src/daemon.js';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { CursorStore } from '../../src/store/cursors.js';
import { openStore } from '../../src/store/store.js';
import { rawConfig, readJsonl, startTestDaemon, tempDir, waitFor } from '../support/harness.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { metricFamilies, parseSamples, type Sample } from '../observability/prom-text.js';
import { promtool } from '../observability/promtool.js';

const SERVICES = ['scheduling', 'workflow'] as const;
const BACKLOG = 150;

const sum = (samples: Sample[], name: string, labels: Record<string, string>): number =>
  samples
    .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .reduce((acc, s) => acc + s.value, 0);

function metricsUsedByArtifacts(): Set<string> {
  const text =
    readFileSync(resolve('helm/feedsync/dashboards/feedsync.json'), 'utf8') +
    readFileSync(resolve('helm/feedsync/rules/feedsync.rules.yaml'), 'utf8');
  const names = [...text.matchAll(/feedsync_[a-z_]+/g)].map((m) => m[0].replace(/_(bucket|sum|count)$/, ''));
  return new Set(names);
}

async function scrape(daemon: Daemon): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${daemon.metricsPort}/metrics`);
  expect(res.status).toBe(200);
  return res.text();
}

/** Runs a daemon against `sandbox` until every event reached the jsonl sink; returns its scrape. */
async function runToCompletion(sandbox: Sandbox, dir: string, queue: Record<string, unknown> = {}) {
  const jsonl = join(dir, 'changes.jsonl');
  const raw = rawConfig(sandbox, dir, {
    queue,
    sinks: [{ name: 'file', type: 'jsonl', path: jsonl }],
    // Caught up, a source waits a whole minute before polling again, so no request lands between
    // the final scrape and the sandbox's count (with 100 ms, one sometimes did).
    source: { poll_interval_ms: 60_000 },
  });
  const { daemon, config } = await startTestDaemon(raw, dir);
  try {
    const total = SERVICES.reduce((n, s) => n + sandbox.events(s).length, 0);
    await waitFor(() => readJsonl(jsonl).length >= total, 30_000, `${total} changes in the jsonl`);
    // The last pages' poll:finished and the last deliveries land just after the lines do.
    await waitFor(
      async () =>
        sum(parseSamples(await scrape(daemon)), 'feedsync_deliveries_total', { outcome: 'ok' }) >= total,
      5_000,
      'the delivery counter to catch up',
    );
    await new Promise((r) => setTimeout(r, 300));
    return { text: await scrape(daemon), jsonl: readJsonl(jsonl), storePath: config.store.path };
  } finally {
    await daemon.stop();
  }
}

describe('a local run against the sandbox', () => {
  const dir = tempDir('feedsync-obs-e2e-');
  let sandbox: Sandbox;
  let result: Awaited<ReturnType<typeof runToCompletion>>;
  let samples: Sample[];

  beforeAll(async () => {
    sandbox = await startSandbox({ seed: 21, backlog: BACKLOG, rate: 0 });
    result = await runToCompletion(sandbox, dir);
    samples = parseSamples(result.text);
  });
  afterAll(async () => {
    await sandbox?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('feedsync_events_total per source and event type = what the sandbox produced', () => {
    for (const service of SERVICES) {
      const byType = new Map<string, number>();
      for (const e of sandbox.events(service)) byType.set(e.event_type, (byType.get(e.event_type) ?? 0) + 1);
      expect(sum(samples, 'feedsync_events_total', { source: service })).toBe(sandbox.events(service).length);
      for (const [type, n] of byType)
        expect(sum(samples, 'feedsync_events_total', { source: service, event_type: type }), type).toBe(n);
    }
  });

  it('feedsync_subject_gone_total = the subject 404s the sandbox served', () => {
    const stats = sandbox.stats();
    let anyGone = 0;
    for (const service of SERVICES) {
      const gone = sum(samples, 'feedsync_subject_gone_total', { source: service });
      expect(gone, service).toBe(stats[service].subject_not_found);
      // A gone subject is fetched at most once (later events of it, and events whose *_deleted
      // follows on the same page, are known gone without a request): 404s ≤ distinct gone subjects.
      const goneChanges = result.jsonl.filter((c) => c.source === service && c.subject_state === 'gone');
      expect(new Set(goneChanges.map((c) => c.subject_url)).size).toBeGreaterThanOrEqual(gone);
      anyGone += gone;
    }
    expect(anyGone, 'the run should include subjects deleted before they were fetched').toBeGreaterThan(0);
  });

  it('feedsync_deliveries_total{outcome="ok"} = lines in the jsonl; nothing retried or dead', () => {
    expect(sum(samples, 'feedsync_deliveries_total', { sink: 'file', outcome: 'ok' })).toBe(
      result.jsonl.length,
    );
    expect(sum(samples, 'feedsync_deliveries_total', { sink: 'file', outcome: 'retry' })).toBe(0);
    expect(sum(samples, 'feedsync_deliveries_total', { sink: 'file', outcome: 'dead' })).toBe(0);
    expect(sum(samples, 'feedsync_changes_enqueued_total', { sink: 'file' })).toBe(result.jsonl.length);
  });

  it('feedsync_cursor_event_id = the stored cursor; last event timestamp = newest occurred_at', () => {
    const db = openStore(result.storePath);
    try {
      const cursors = new CursorStore(db);
      for (const service of SERVICES) {
        const stored = cursors.get(service)!.eventId;
        expect(stored).toBe(Math.max(...sandbox.events(service).map((e) => e.id)));
        expect(sum(samples, 'feedsync_cursor_event_id', { source: service })).toBe(stored);
        const newest = Math.max(...sandbox.events(service).map((e) => Date.parse(e.occurred_at)));
        expect(sum(samples, 'feedsync_last_event_timestamp_seconds', { source: service })).toBe(
          newest / 1000,
        );
        expect(sum(samples, 'feedsync_source_behind', { source: service })).toBe(0);
      }
    } finally {
      db.close();
    }
  });

  it('feedsync_http_requests_total agrees with the sandbox request stats per kind and code', () => {
    const stats = sandbox.stats();
    for (const service of SERVICES) {
      const s = stats[service];
      for (const kind of ['feed', 'subject'] as const) {
        // The sandbox counts authenticated requests by kind; 401 challenges separately.
        const authenticated =
          sum(samples, 'feedsync_http_requests_total', { source: service, kind }) -
          sum(samples, 'feedsync_http_requests_total', { source: service, kind, code: '401' });
        expect(authenticated, `${service} ${kind}`).toBe(s.requests[kind]);
      }
      const challenges = sum(samples, 'feedsync_http_requests_total', { source: service, code: '401' });
      expect(challenges).toBe(s.unauthorized);
      expect(sum(samples, 'feedsync_http_requests_total', { source: service, code: '404' })).toBe(
        s.subject_not_found,
      );
      expect(sum(samples, 'feedsync_http_requests_total', { source: service, code: '200' })).toBe(
        s.statuses['200'],
      );
    }
  });

  it('feedsync_sink_state / position / lag: the sink is live at each source cursor, nothing lost', () => {
    for (const source of SERVICES) {
      const labels = { source, sink: 'file' };
      expect(sum(samples, 'feedsync_sink_state', { ...labels, state: 'live' })).toBe(1);
      for (const state of ['failing', 'parked', 'catching_up'])
        expect(sum(samples, 'feedsync_sink_state', { ...labels, state }), state).toBe(0);
      expect(sum(samples, 'feedsync_sink_position', labels)).toBe(
        sum(samples, 'feedsync_cursor_event_id', { source }),
      );
      expect(sum(samples, 'feedsync_sink_position', labels)).toBeGreaterThan(0);
      for (const name of [
        'feedsync_sink_lag_events',
        'feedsync_sink_lag_seconds',
        'feedsync_sink_pending_ids',
        'feedsync_sink_lost_upstream',
        'feedsync_sink_parked_total',
        'feedsync_sink_rejoined_total',
      ])
        expect(sum(samples, name, labels), name).toBe(0);
    }
  });

  it('the real scrape passes promtool check metrics', () => {
    const { code, output } = promtool(['check', 'metrics'], result.text);
    expect(output.trim()).toBe('');
    expect(code).toBe(0);
  });

  it('every metric the dashboard and the alert rules use is in the scrape', () => {
    const exported = new Set(metricFamilies(result.text).keys());
    const missing = [...metricsUsedByArtifacts()].filter((m) => !exported.has(m));
    expect(missing).toEqual([]);
  });
});

describe('a bullmq run against the sandbox', () => {
  const dir = tempDir('feedsync-obs-e2e-bull-');
  let sandbox: Sandbox;
  let redis: RedisServer;

  beforeAll(async () => {
    [sandbox, redis] = await Promise.all([startSandbox({ seed: 22, backlog: 60, rate: 0 }), startRedis()]);
  });
  afterAll(async () => {
    await sandbox?.close();
    await redis?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('has every dashboard/rules metric, queue gauges for its sink, and passes promtool', async () => {
    const { text, jsonl } = await runToCompletion(sandbox, dir, {
      driver: 'bullmq',
      redis_url: redis.url,
      prefix: 'obs',
    });
    const exported = new Set(metricFamilies(text).keys());
    expect([...metricsUsedByArtifacts()].filter((m) => !exported.has(m))).toEqual([]);
    const samples = parseSamples(text);
    for (const state of ['waiting', 'active', 'delayed', 'failed'])
      expect(sum(samples, 'feedsync_queue_jobs', { sink: 'file', state }), state).toBe(0);
    expect(sum(samples, 'feedsync_dead_letters', { sink: 'file' })).toBe(0);
    expect(sum(samples, 'feedsync_deliveries_total', { sink: 'file', outcome: 'ok' })).toBe(jsonl.length);
    for (const source of SERVICES) {
      expect(sum(samples, 'feedsync_sink_state', { source, sink: 'file', state: 'live' }), source).toBe(1);
      expect(sum(samples, 'feedsync_sink_position', { source, sink: 'file' }), source).toBeGreaterThan(0);
      expect(sum(samples, 'feedsync_sink_lag_events', { source, sink: 'file' }), source).toBe(0);
    }
    const { code, output } = promtool(['check', 'metrics'], text);
    expect(output.trim()).toBe('');
    expect(code).toBe(0);
  });
});
