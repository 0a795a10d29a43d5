// kill -9 of one feedsync process, restarted after a seeded pause (as an orchestrator would).
// Local: the dead process's store lease is expired at once (as if its TTL had passed), so the
// standby or the restarted process takes over without waiting out 15 s each time.
import type { Nemesis } from '../world.js';
import { pickProcess, resolveSlot } from './targets.js';

export const kill9: Nemesis = {
  kind: 'kill9',
  scenarios: ['local', 'bullmq'],
  weight: 3,
  plan: (rng, ctx) => ({ target: pickProcess(rng, ctx), params: { restartMs: rng.int(0, 1500) } }),
  async run(world, step) {
    const slot = resolveSlot(world, step.target);
    if (!slot) return;
    const t = world.now();
    const pid = world.sup.kill9(slot);
    if (pid === undefined) return;
    world.record({ kind: 'kill9', target: slot, pids: [pid], start: t, end: t, detail: { ...step.params } });
    if (world.scenario === 'local') world.expireLeaseOf(pid);
    await world.sleep(Number(step.params.restartMs));
    world.sup.start(slot);
  },
};
