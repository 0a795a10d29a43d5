// Redis losing the tail of its AOF, three times under load: each fault kills redis-server with -9,
// cuts the last second of writes from its newest AOF file (what a host crash before the
// `everysec` fsync loses) and restarts it in place, while two `poll` and two `work` processes run
// and write, among others, one sqlite and one postgres mirror that both workers share. The
// checker then asks for nothing lost (a dead-lettered change is one that no recorded sink got),
// no unexplained copy, no fencing token handed out again, and both mirrors equal to the feed's
// final state, all within the run's 60 s drain. FAULT_SEED=n replays a run.
import { afterAll, describe, expect, it } from 'vitest';
import { cleanupFaultRuns, faultSeed, runFaultScenario } from './runner.js';

const seed = faultSeed();

describe(`Redis AOF tail cut three times, bullmq driver (FAULT_SEED=${seed})`, () => {
  afterAll(cleanupFaultRuns);
  it(
    'loses nothing, the mirrors end at the feed, delivery back within the drain',
    { timeout: 200_000 },
    async () => {
      const run = await runFaultScenario({
        seed,
        scenario: 'bullmq',
        faults: 3,
        kinds: ['redis-kill'],
        maxFaultMs: 10_000,
        backlog: 3000,
        rate: 30,
        drainMs: 60_000,
        gapMs: [1000, 2500],
        log: process.env.FAULT_VERBOSE ? (l) => console.log(l) : undefined,
      });
      console.log(run.report());
      expect(run.history.faults.filter((f) => f.kind === 'redis-kill')).toHaveLength(3);
      expect(run.result.anomalies, run.report()).toEqual([]);
    },
  );
});
