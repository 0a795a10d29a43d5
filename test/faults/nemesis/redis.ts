// Redis itself: killed with -9 and restarted on the same port from its AOF (everysec) with the
// AOF's last second of writes cut off (what a host crash before the fsync loses; a kill of the
// process alone loses nothing, so the cut is the harder fault), or frozen with SIGSTOP for longer
// than the source leases.
import type { Nemesis } from '../world.js';

export const redisKill: Nemesis = {
  kind: 'redis-kill',
  scenarios: ['bullmq'],
  weight: 1.5,
  plan: (rng) => ({
    target: 'redis',
    params: { downMs: rng.int(0, 2000), cutMs: Number(process.env.FAULT_AOF_CUT_MS ?? 1000) },
  }),
  async run(world, step) {
    const redis = world.redis!;
    const t0 = world.now();
    const cutBytes = await redis.kill9(Number(step.params.cutMs ?? 0));
    await world.sleep(Number(step.params.downMs));
    await redis.start();
    world.record({
      kind: 'redis-kill',
      target: 'redis',
      pids: [],
      start: t0,
      end: world.now(),
      detail: { ...step.params, cutBytes },
    });
  },
};

export const redisFreeze: Nemesis = {
  kind: 'redis-freeze',
  scenarios: ['bullmq'],
  weight: 1,
  plan: (rng, ctx) => ({
    target: 'redis',
    params: { ms: Math.min(ctx.maxFaultMs, ctx.timing.leaseTtlMs + rng.int(500, 2500)) },
  }),
  async run(world, step) {
    const redis = world.redis!;
    const t0 = world.now();
    redis.freeze();
    await world.sleep(Number(step.params.ms));
    redis.thaw();
    world.record({
      kind: 'redis-freeze',
      target: 'redis',
      pids: [],
      start: t0,
      end: world.now(),
      detail: { ...step.params },
    });
  },
};
