// A worker frozen past its job lock and its shard lease (a long GC pause, a throttled pod, a VM
// migration), with real processes: `poll` + 2 × `work`, a module sink taking ~20 ms per change, the
// worker SIGSTOPped for several lease TTLs while delivering, then resumed. Before shard leases the
// resumed worker went on delivering slices another worker had taken (50 extra copies, deliveries
// started after the other worker had delivered them, one subject delivered by two processes at
// once). Now: it starts nothing once resumed; the only copies are the sink calls in flight at the
// freeze, and it reports each of them; per-subject order and exclusion hold otherwise.
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { tempDir } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig } from '../support/process.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { bullmqConfig, eventually, sandboxKeys, seedNote, sleep, testSeed, waitStarted } from './support.js';
import { readAttempts, type Attempt } from './fixtures/order-sink-records.js';

const TTL_MS = 3000;
const FREEZE_MS = 8000;
const seed = testSeed();
const note = seedNote(seed);

describe(`bullmq: a worker frozen past its lease ${note}`, () => {
  let sandbox: Sandbox;
  let redis: RedisServer;
  const dir = tempDir('feedsync-rb-freeze-');

  beforeAll(async () => {
    redis = await startRedis();
    sandbox = await startSandbox({ seed, backlog: 300 });
  });
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
    await redis?.stop();
  });

  it('starts nothing once resumed; copies only from the calls in flight at the freeze, each reported', async () => {
    const configPath = writeConfig(
      dir,
      bullmqConfig(sandbox, dir, redis.url, {
        shutdownTimeoutMs: 5000,
        queue: { concurrency: 4, lease_ttl_ms: TTL_MS },
        sinks: [
          {
            name: 'slow',
            type: 'module',
            module: resolve(import.meta.dirname, 'fixtures/order-sink.js'),
            options: { path: './attempts-${WORKER_ID}.jsonl', seed: '${SINK_SEED}', max_latency_ms: 40 },
          },
        ],
      }),
    );
    const start = (mode: 'poll' | 'work', id: string, sinkSeed: number) =>
      spawnCli([mode], { config: configPath, env: { WORKER_ID: id, SINK_SEED: String(sinkSeed) } });
    const procs = [start('poll', 'poll', 0), start('work', 'a', seed + 1), start('work', 'b', seed + 2)];
    await waitStarted(...procs);

    // Freeze the worker that is delivering right now (whichever BullMQ gave the slices to).
    await eventually(() => readAttempts(dir).length >= 20, 30_000, `deliveries under way ${note}`);
    const latest = readAttempts(dir).sort((x, y) => y.start - x.start)[0]!;
    const frozen = procs.find((p) => p.pid === latest.pid)!;
    const frozenAt = Date.now();
    frozen.signal('SIGSTOP');
    await sleep(FREEZE_MS);
    const resumedAt = Date.now();
    frozen.signal('SIGCONT');

    const expected = sandboxKeys(sandbox);
    const delivered = () =>
      new Set(
        readAttempts(dir)
          .filter((a) => a.ok)
          .map((a) => a.key),
      );
    await eventually(() => delivered().size === expected.length, 60_000, `all keys delivered ${note}`).catch(
      (err: Error) => {
        throw new Error(`${err.message}: ${delivered().size} of ${expected.length}`);
      },
    );
    await sleep(2 * TTL_MS);

    const attempts = readAttempts(dir).sort((x, y) => x.start - y.start);
    // Calls in flight at the freeze: spanning the resume (none can start while the process is
    // stopped; one may start in the instant between the signal being sent and taking effect).
    const inFlight = attempts.filter((a) => a.pid === frozen.pid && a.start < resumedAt && a.end > resumedAt);
    // A call that returned just before the freeze, its progress write not yet out, is in flight
    // too as far as the shard goes: the next owner delivers it again, and the resumed worker
    // reports it when that write is refused.
    const unrecorded = new Set(
      attempts
        .filter((a) => a.pid === frozen.pid && a.ok && a.end >= frozenAt - 1_000 && a.end <= resumedAt)
        .map((a) => a.key),
    );
    const reported = frozen
      .logs()
      .filter(
        (l) => typeof l.msg === 'string' && l.msg.startsWith('a delivery finished after another worker took'),
      )
      .reduce((n, l) => n + Number(l.changes), 0);

    // Nothing the resumed worker started repeats a change another worker had already delivered.
    const firstOk = new Map<string, Attempt>();
    for (const a of attempts) if (a.ok && !firstOk.has(a.key)) firstOk.set(a.key, a);
    const lateStarts = attempts.filter(
      (a) => a.pid === frozen.pid && a.start >= resumedAt && firstOk.get(a.key)!.pid !== frozen.pid,
    );
    expect(
      lateStarts.map((a) => a.key).slice(0, 10),
      `started after another worker delivered ${note}`,
    ).toEqual([]);

    // Copies: only the calls in flight at the freeze, and the frozen worker reported each.
    const counts = new Map<string, number>();
    for (const a of attempts) if (a.ok) counts.set(a.key, (counts.get(a.key) ?? 0) + 1);
    const copies = [...counts].filter(([, n]) => n > 1).map(([k]) => k);
    const inFlightKeys = new Set(inFlight.map((a) => a.key));
    expect(
      copies.filter((k) => !inFlightKeys.has(k) && !unrecorded.has(k)),
      `copies not explained by the freeze ${note}`,
    ).toEqual([]);
    expect(copies.length, `copies ${note}`).toBeLessThanOrEqual(reported);

    // No two deliveries of one subject in flight at once, but for the calls frozen mid-way.
    const bySubject = new Map<string, Attempt[]>();
    for (const a of attempts) bySubject.set(a.subject_url, [...(bySubject.get(a.subject_url) ?? []), a]);
    const overlaps: string[] = [];
    for (const [subject, list] of bySubject)
      for (let i = 1; i < list.length; i++) {
        const [prev, cur] = [list[i - 1]!, list[i]!];
        if (cur.start < prev.end && !inFlight.includes(prev) && !inFlight.includes(cur))
          overlaps.push(`${subject}: ${prev.key} (pid ${prev.pid}) and ${cur.key} (pid ${cur.pid})`);
      }
    expect(overlaps.slice(0, 10), `overlapping deliveries ${note}`).toEqual([]);
    for (const p of procs) expect(p.exit, p.text().slice(-1000)).toBeUndefined();
  });
});
