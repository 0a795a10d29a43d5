// A sink outage seen from outside a real daemon (local `run` against the sandbox): a webhook whose
// receiver is unreachable, beside a jsonl file. The file gets every event; the webhook is parked on
// both sources (max_backlog 20) and probed; /metrics says so per sink and source; /readyz stays 200,
// since the process still does its job for the other sink (docs/sink-positions.md).
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Daemon } from '../../src/daemon.js';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { rawConfig, readJsonl, startTestDaemon, tempDir, waitFor } from '../support/harness.js';
import { parseSamples, sampleValue, type Sample } from '../observability/prom-text.js';

const SERVICES = ['scheduling', 'workflow'] as const;
// Several commits per source (a backlog commits up to 16 pages at a time): the webhook parks on both.
const BACKLOG = 1500;
const dir = tempDir('feedsync-obs-outage-');
let sandbox: Sandbox;
let daemon: Daemon;

async function get(path: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`http://127.0.0.1:${daemon.metricsPort}${path}`);
  return { status: res.status, text: await res.text() };
}

async function samples(): Promise<Sample[]> {
  return parseSamples((await get('/metrics')).text);
}

beforeAll(async () => {
  sandbox = await startSandbox({ seed: 41, backlog: BACKLOG, rate: 0 });
  const raw = rawConfig(sandbox, dir, {
    sinks: [
      { name: 'file', type: 'jsonl', path: join(dir, 'changes.jsonl') },
      // Nothing listens on port 9 of the loopback: every delivery is refused (retried, then probed).
      { name: 'hook', type: 'webhook', url: 'http://127.0.0.1:9/hook', timeout_ms: 500, max_backlog: 20 },
    ],
  });
  ({ daemon } = await startTestDaemon(raw, dir));
});

afterAll(async () => {
  await daemon?.stop();
  await sandbox?.close();
  rmSync(dir, { recursive: true, force: true });
});

it('parks the failing sink on every source, delivers everything to the other, and stays ready', async () => {
  const total = SERVICES.reduce((n, s) => n + sandbox.events(s).length, 0);
  await waitFor(
    () => readJsonl(join(dir, 'changes.jsonl')).length >= total,
    30_000,
    `${total} changes in the jsonl`,
  );
  const parked = (s: Sample[], source: string) =>
    sampleValue(s, 'feedsync_sink_state', { source, sink: 'hook', state: 'parked' }) === 1;
  let last: Sample[] = [];
  await waitFor(
    async () => {
      last = await samples();
      return SERVICES.every((source) => parked(last, source));
    },
    10_000,
    'the webhook to be parked on both sources',
  );
  const v = (name: string, labels: Record<string, string>) => sampleValue(last, name, labels);
  for (const source of SERVICES) {
    const cursor = v('feedsync_cursor_event_id', { source });
    expect(v('feedsync_sink_state', { source, sink: 'file', state: 'live' }), source).toBe(1);
    expect(v('feedsync_sink_position', { source, sink: 'file' }), source).toBe(cursor);
    expect(v('feedsync_sink_position', { source, sink: 'hook' }), source).toBeLessThan(cursor);
    expect(v('feedsync_sink_lag_events', { source, sink: 'hook' }), source).toBeGreaterThan(0);
    expect(v('feedsync_sink_lag_seconds', { source, sink: 'hook' }), source).toBeGreaterThan(0);
    expect(v('feedsync_sink_pending_ids', { source, sink: 'hook' }), source).toBeGreaterThan(0);
    expect(v('feedsync_sink_parked_total', { source, sink: 'hook' }), source).toBeGreaterThanOrEqual(1);
    expect(v('feedsync_sink_parked_total', { source, sink: 'file' }), source).toBe(0);
  }
  await waitFor(
    async () => sampleValue(await samples(), 'feedsync_sink_failing', { sink: 'hook' }) === 1,
    10_000,
    'the webhook to be probed as failing',
  );
  const ready = await get('/readyz');
  expect({ status: ready.status, body: JSON.parse(ready.text) as unknown }).toEqual({
    status: 200,
    body: { ready: true },
  });
});
