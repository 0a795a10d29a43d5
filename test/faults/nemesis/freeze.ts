// SIGSTOP of one feedsync process, then SIGCONT: briefly (shorter than any lease), or past its
// lease — the store lease (local), the source lease (a poller), or the BullMQ lock of its active
// slices plus the stalled check (a worker) — so that another process takes over meanwhile.
import type { Nemesis, Params, PlanContext, Timing } from '../world.js';
import { pickProcess, resolveSlot } from './targets.js';

/** How long a freeze must last to outlive what the target holds. */
export function pastLeaseMs(timing: Timing, scenario: string, slot: string): number {
  if (scenario === 'local') return timing.localLeaseMs;
  return slot.startsWith('w') ? timing.workerLockMs : timing.leaseTtlMs;
}

function longestFor(ctx: PlanContext, target: string): number {
  return pastLeaseMs(ctx.timing, ctx.scenario, target) + 1_000;
}

export const freeze: Nemesis = {
  kind: 'freeze',
  scenarios: ['local', 'bullmq'],
  weight: 2,
  plan(rng, ctx) {
    const target = pickProcess(rng, ctx);
    const extraMs = rng.int(500, 2500);
    const long = rng.chance(0.6) && longestFor(ctx, target) + extraMs <= ctx.maxFaultMs;
    const params: Params = long ? { mode: 'past-lease', extraMs } : { mode: 'short', ms: rng.int(300, 1500) };
    return { target, params };
  },
  async run(world, step) {
    const slot = resolveSlot(world, step.target);
    if (!slot) return;
    const ms =
      step.params.mode === 'past-lease'
        ? pastLeaseMs(world.timing, world.scenario, slot) + Number(step.params.extraMs)
        : Number(step.params.ms);
    const t0 = world.now();
    const pid = world.sup.freeze(slot);
    if (pid === undefined) return;
    await world.sleep(ms);
    world.sup.thaw(slot);
    world.record({
      kind: 'freeze',
      target: slot,
      pids: [pid],
      start: t0,
      end: world.now(),
      detail: { ...step.params, ms },
    });
  },
};
