// /readyz and /healthz of a real daemon while its upstream fails every feed poll: not ready (503,
// naming the source and its error) once 5 polls in a row failed, ready again after the upstream
// recovers; alive (200) throughout.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Daemon } from '../../src/daemon.js';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { rawConfig, readJsonl, startTestDaemon, tempDir, waitFor } from '../support/harness.js';

const dir = tempDir('feedsync-obs-health-');
let sandbox: Sandbox;
let daemon: Daemon;
const healthCodes: number[] = [];
let sampler: NodeJS.Timeout | undefined;

async function get(path: string): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`http://127.0.0.1:${daemon.metricsPort}${path}`);
  return { status: res.status, body: await res.json() };
}

beforeAll(async () => {
  sandbox = await startSandbox({ seed: 31, backlog: 20, rate: 0 });
  const raw = rawConfig(sandbox, dir, { services: ['scheduling'], source: { poll_interval_ms: 50 } });
  ({ daemon } = await startTestDaemon(raw, dir));
  // /healthz sampled all along, not just at the checkpoints.
  sampler = setInterval(() => {
    void get('/healthz').then(
      (r) => healthCodes.push(r.status),
      () => healthCodes.push(-1),
    );
  }, 200);
});

afterAll(async () => {
  clearInterval(sampler);
  await daemon?.stop();
  await sandbox?.close();
  rmSync(dir, { recursive: true, force: true });
});

it('/readyz goes 503 naming the failing source after 5 failed polls, and 200 after recovery', async () => {
  await waitFor(() => readJsonl(join(dir, 'changes.jsonl')).length === 20, 10_000, 'the backlog');
  expect(await get('/readyz')).toEqual({ status: 200, body: { ready: true } });

  sandbox.setFaults({ rate: 1, kinds: ['status_500'], paths: 'feed' });
  let last: { status: number; body: unknown } | undefined;
  await waitFor(async () => (last = await get('/readyz')).status === 503, 40_000, '/readyz to answer 503');
  const body = last!.body as { ready: boolean; reasons: string[] };
  expect(body.ready).toBe(false);
  expect(body.reasons).toHaveLength(1);
  expect(body.reasons[0]).toMatch(/^source "scheduling" failed its last \d+ polls/);
  expect(body.reasons[0]).toContain('HTTP 500');
  expect(body.reasons[0]).not.toContain(sandbox.password);
  // Only feed requests failed, and at least 5 polls' worth of them.
  expect(sandbox.stats().scheduling.faults.status_500).toBeGreaterThanOrEqual(5);

  sandbox.setFaults({ rate: 0 });
  sandbox.generate('scheduling', 3);
  await waitFor(async () => (await get('/readyz')).status === 200, 20_000, '/readyz back to 200');
  await waitFor(() => readJsonl(join(dir, 'changes.jsonl')).length === 23, 10_000, 'the new events');

  clearInterval(sampler);
  expect(healthCodes.length).toBeGreaterThan(5);
  expect(new Set(healthCodes)).toEqual(new Set([200]));
  expect((await get('/healthz')).body).toEqual({ status: 'ok' });
});
