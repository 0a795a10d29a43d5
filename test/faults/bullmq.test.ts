// The short seeded fault run of scaled mode (the soak, `npm run soak`, runs many more): two
// `feedsync poll` (one holds each source, the other stands by) and two `feedsync work` over a real
// redis-server (AOF everysec), each process behind its own TCP proxy, four sinks, and a handful
// of seeded faults — kill -9, SIGSTOP past the leases, Redis killed (its AOF cut by its last second) and restarted, or frozen, Redis
// connections cut or frozen, sinks failing/hanging/slow, `cursor set/reset` or `replay` racing the
// pollers, the feed switching dialects or failing — then the checker over the whole history
// (checker.ts lists the anomaly kinds). FAULT_SEED=n replays a run.
import { afterAll, describe, expect, it } from 'vitest';
import { cleanupFaultRuns, faultSeed, runFaultScenario } from './runner.js';

const seed = faultSeed();

describe(`fault injection, bullmq driver (FAULT_SEED=${seed})`, () => {
  afterAll(cleanupFaultRuns);
  it('no anomaly in the whole history', { timeout: 200_000 }, async () => {
    const run = await runFaultScenario({
      seed,
      scenario: 'bullmq',
      faults: Number(process.env.FAULT_COUNT ?? 7),
      maxFaultMs: Number(process.env.FAULT_MAX_MS ?? 10_000),
      backlog: Number(process.env.FAULT_BACKLOG ?? 3000),
      rate: Number(process.env.FAULT_RATE ?? 30),
      // Room for a catch-up after a replay on a CI machine running other suites beside it.
      drainMs: 60_000,
      gapMs: [300, 1500],
      require: [
        ['kill9'],
        ['freeze'],
        ['redis-kill'],
        ['redis-freeze', 'proxy-cut', 'proxy-freeze'],
        ['sink-fail', 'sink-hang', 'sink-slow'],
        ['cursor', 'replay'],
      ],
      log: process.env.FAULT_VERBOSE ? (l) => console.log(l) : undefined,
    });
    console.log(run.report());
    expect(run.result.anomalies, run.report()).toEqual([]);
  });
});
