// Per-subject order across processes (docs/guarantees.md, "Order"): one `poll` and two `work` processes with
// queue.concurrency 4 and the default shards deliver to a module sink that takes a random little
// time and sometimes asks to retry. For every subject the first deliveries follow the feed's order,
// and no two deliveries of one subject are ever in flight at the same time, in any process.
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox, type SandboxEvent } from '../../src/sandbox/index.js';
import { tempDir } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig } from '../support/process.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import {
  bullmqConfig,
  eventually,
  sandboxKeys,
  seedNote,
  stopGracefully,
  testSeed,
  waitStarted,
} from './support.js';
import { readAttempts, type Attempt } from './fixtures/order-sink-records.js';

const BACKLOG = 500;
const SHUTDOWN_MS = 5000;
const seed = testSeed();
const note = seedNote(seed);

/** Feed order: scheduling lists by id, workflow by timestamp then id (the sandbox's spec reading). */
function feedOrder(events: SandboxEvent[], service: 'scheduling' | 'workflow'): SandboxEvent[] {
  if (service === 'scheduling') return events;
  return [...events].sort((a, b) => Date.parse(a.occurred_at) - Date.parse(b.occurred_at) || a.id - b.id);
}

describe(`bullmq: per-subject order with 2 work processes × concurrency 4 ${note}`, () => {
  let sandbox: Sandbox;
  let redis: RedisServer;
  const dir = tempDir('feedsync-rb-order-');

  beforeAll(async () => {
    redis = await startRedis();
    sandbox = await startSandbox({ seed, backlog: BACKLOG });
  });
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
    await redis?.stop();
  });

  it('keeps feed order per subject_url and never overlaps deliveries of one subject', async () => {
    const configPath = writeConfig(
      dir,
      bullmqConfig(sandbox, dir, redis.url, {
        shutdownTimeoutMs: SHUTDOWN_MS,
        queue: { concurrency: 4 },
        sinks: [
          {
            name: 'order',
            type: 'module',
            module: resolve(import.meta.dirname, 'fixtures/order-sink.js'),
            options: {
              path: './attempts-${WORKER_ID}.jsonl',
              seed: '${SINK_SEED}',
              max_latency_ms: 4,
              retry_rate: 0.05,
            },
          },
        ],
      }),
    );
    const start = (mode: 'poll' | 'work', id: string, sinkSeed: number) =>
      spawnCli([mode], { config: configPath, env: { WORKER_ID: id, SINK_SEED: String(sinkSeed) } });
    // Both work processes hold their shares of the shards before the backlog is polled: otherwise
    // the first to start may drain it alone before the second has joined.
    const works = [start('work', 'a', seed + 1), start('work', 'b', seed + 2)];
    await Promise.all(
      works.map((w) =>
        w.waitForLog((e) => /^acquired the lease of shard/.test(String(e.msg)), 30_000, 'a shard lease'),
      ),
    );
    const procs = [start('poll', 'poll', 0), ...works];
    await waitStarted(...procs);

    const expected = sandboxKeys(sandbox);
    const deliveredKeys = () =>
      new Set(
        readAttempts(dir)
          .filter((a) => a.ok)
          .map((a) => a.key),
      );
    await eventually(
      () => deliveredKeys().size === expected.length,
      60_000,
      `all ${expected.length} keys delivered ${note}`,
    ).catch((err: Error) => {
      throw new Error(`${err.message}: ${deliveredKeys().size} delivered`);
    });

    const attempts = readAttempts(dir);
    // Both processes did deliver, and retries did happen: otherwise this proves little.
    expect(new Set(attempts.map((a) => a.pid)).size, note).toBe(2);
    expect(attempts.filter((a) => !a.ok).length, `some injected retries ${note}`).toBeGreaterThan(0);

    const bySubject = new Map<string, Attempt[]>();
    for (const a of attempts) {
      const list = bySubject.get(a.subject_url) ?? [];
      list.push(a);
      bySubject.set(a.subject_url, list);
    }
    const overlaps: string[] = [];
    const disorders: string[] = [];
    for (const service of ['scheduling', 'workflow'] as const) {
      const wanted = new Map<string, number[]>();
      for (const ev of feedOrder(sandbox.events(service), service)) {
        const list = wanted.get(ev.subject_url) ?? [];
        list.push(ev.id);
        wanted.set(ev.subject_url, list);
      }
      for (const [subject, ids] of wanted) {
        const list = (bySubject.get(subject) ?? []).sort((a, b) => a.start - b.start);
        for (let i = 1; i < list.length; i++) {
          const prev = list[i - 1]!;
          const cur = list[i]!;
          if (cur.start < prev.end)
            overlaps.push(`${subject}: ${prev.key} (pid ${prev.pid}) and ${cur.key} (pid ${cur.pid})`);
        }
        const firsts: number[] = [];
        const seen = new Set<string>();
        for (const a of list) {
          if (!a.ok || seen.has(a.key)) continue;
          seen.add(a.key);
          firsts.push(a.event_id);
        }
        if (JSON.stringify(firsts) !== JSON.stringify(ids))
          disorders.push(`${subject}: delivered ${firsts.join(',')} but the feed lists ${ids.join(',')}`);
      }
    }
    expect(overlaps.slice(0, 10), `overlapping deliveries ${note}`).toEqual([]);
    expect(disorders.slice(0, 10), `per-subject order ${note}`).toEqual([]);

    const exits = await stopGracefully(procs, SHUTDOWN_MS);
    for (const exit of exits) {
      expect(exit, `graceful stop ${note}`).toMatchObject({ code: 0, signal: null });
      expect(exit.ms, `stop time of ${exit.pid} ${note}`).toBeLessThanOrEqual(SHUTDOWN_MS + 1_000);
    }
  });
});
