// Redis itself: killed with -9 and restarted on the same port from its AOF (everysec), or frozen
// with SIGSTOP for longer than the source leases.
import type { Nemesis } from '../world.js';

export const redisKill: Nemesis = {
  kind: 'redis-kill',
  scenarios: ['bullmq'],
  weight: 1.5,
  plan: (rng) => ({ target: 'redis', params: { downMs: rng.int(0, 2000) } }),
  async run(world, step) {
    const redis = world.redis!;
    const t0 = world.now();
    await redis.kill9();
    await world.sleep(Number(step.params.downMs));
    await redis.start();
    world.record({
      kind: 'redis-kill',
      target: 'redis',
      pids: [],
      start: t0,
      end: world.now(),
      detail: { ...step.params },
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
