// Which feedsync process a fault hits: local runs have a holder (owns the store) and a standby;
// bullmq runs have two pollers and two workers, by slot name.
import type { Rng } from '../../../src/sandbox/prng.js';
import type { PlanContext, World } from '../world.js';

export const LOCAL_SLOTS = ['run-a', 'run-b'];
export const BULLMQ_SLOTS = ['p1', 'p2', 'w1', 'w2'];

export function pickProcess(rng: Rng, ctx: PlanContext): string {
  if (ctx.scenario === 'local') return rng.chance(0.75) ? 'holder' : 'standby';
  return rng.pick(BULLMQ_SLOTS);
}

/** The slot a symbolic target names now (holder/standby resolved from the lease samples). */
export function resolveSlot(world: World, target: string): string | undefined {
  if (target !== 'holder' && target !== 'standby') return target;
  const holder = world.holderSlot();
  if (target === 'holder') return holder ?? world.pollers.find((s) => world.sup.running(s));
  return world.pollers.find((s) => s !== holder && world.sup.running(s)) ?? holder;
}
