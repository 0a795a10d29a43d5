// The network between a feedsync process and Redis (each process has its own proxy): every
// connection cut at once, mid-command; or frozen (nothing forwarded, sockets kept open) and thawed.
import type { Nemesis, World } from '../world.js';
import { BULLMQ_SLOTS } from './targets.js';

function targets(world: World, target: string): { slots: string[]; pids: number[] } {
  const slots = target === 'all' ? [...world.proxies.keys()] : [target];
  const pids = slots.map((s) => world.sup.pid(s)).filter((p): p is number => p !== undefined);
  return { slots, pids };
}

export const proxyCut: Nemesis = {
  kind: 'proxy-cut',
  scenarios: ['bullmq'],
  weight: 1.5,
  plan: (rng) => ({ target: rng.chance(0.25) ? 'all' : rng.pick(BULLMQ_SLOTS), params: {} }),
  async run(world, step) {
    const { slots, pids } = targets(world, step.target);
    const t = world.now();
    let connections = 0;
    for (const s of slots) connections += world.proxies.get(s)?.cut() ?? 0;
    world.record({ kind: 'proxy-cut', target: step.target, pids, start: t, end: t, detail: { connections } });
  },
};

export const proxyFreeze: Nemesis = {
  kind: 'proxy-freeze',
  scenarios: ['bullmq'],
  weight: 1,
  plan: (rng, ctx) => ({
    target: rng.chance(0.25) ? 'all' : rng.pick(BULLMQ_SLOTS),
    params: { ms: Math.min(ctx.maxFaultMs, rng.int(500, ctx.timing.leaseTtlMs + 2500)) },
  }),
  async run(world, step) {
    const { slots, pids } = targets(world, step.target);
    const t0 = world.now();
    for (const s of slots) world.proxies.get(s)?.freeze();
    await world.sleep(Number(step.params.ms));
    for (const s of slots) world.proxies.get(s)?.thaw();
    world.record({
      kind: 'proxy-freeze',
      target: step.target,
      pids,
      start: t0,
      end: world.now(),
      detail: { ...step.params },
    });
  },
};
