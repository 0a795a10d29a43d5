// The short seeded fault run of the local driver (the soak, `npm run soak`, runs many more):
// two `feedsync run` processes on one store (one holds it, one stands by), four sinks, a handful
// of seeded faults — kill -9, SIGSTOP, sinks failing/hanging/slow, the store full or locked,
// `cursor set/reset` or `replay` racing the pollers, the feed switching dialects or failing — then
// the checker over the whole history (checker.ts lists the anomaly kinds). FAULT_SEED=n replays a
// run.
import { afterAll, describe, expect, it } from 'vitest';
import { cleanupFaultRuns, faultSeed, runFaultScenario } from './runner.js';

const seed = faultSeed();

describe(`fault injection, local driver (FAULT_SEED=${seed})`, () => {
  afterAll(cleanupFaultRuns);
  it('no anomaly in the whole history', { timeout: 160_000 }, async () => {
    const run = await runFaultScenario({
      seed,
      scenario: 'local',
      faults: Number(process.env.FAULT_COUNT ?? 7),
      maxFaultMs: Number(process.env.FAULT_MAX_MS ?? 10_000),
      backlog: Number(process.env.FAULT_BACKLOG ?? 2000),
      rate: Number(process.env.FAULT_RATE ?? 20),
      // Room for a catch-up after a replay on a CI machine running other suites beside it.
      drainMs: 50_000,
      gapMs: [300, 1500],
      require: [
        ['kill9'],
        ['freeze', 'store-full', 'store-lock'],
        ['sink-fail', 'sink-hang', 'sink-slow'],
        ['cursor', 'replay'],
      ],
      log: process.env.FAULT_VERBOSE ? (l) => console.log(l) : undefined,
    });
    console.log(run.report());
    expect(run.result.anomalies, run.report()).toEqual([]);
  });
});
