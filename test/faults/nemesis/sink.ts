// A sink misbehaving for a while (background: the schedule goes on meanwhile), through the
// recorder sink's control file: throwing on every delivery, hanging (a delivery settles only when
// the window ends), or slow.
import type { Nemesis, SinkBehaviour } from '../world.js';
import type { FaultKind } from '../types.js';

export const RECORDED_SINKS = ['rec-a', 'rec-b'];

function sinkNemesis(kind: FaultKind, mode: SinkBehaviour['mode'], weight: number): Nemesis {
  return {
    kind,
    scenarios: ['local', 'bullmq'],
    weight,
    background: true,
    plan: (rng, ctx) => ({
      target: rng.pick(RECORDED_SINKS),
      params: {
        ms: Math.min(ctx.maxFaultMs, rng.int(1500, 8000)),
        ...(mode === 'slow' ? { slowMs: rng.int(20, 150) } : {}),
      },
    }),
    async run(world, step) {
      const t0 = world.now();
      const ms = Number(step.params.ms);
      const until = Date.now() + ms;
      world.setSink(step.target, { mode, until, ms: Number(step.params.slowMs ?? 0) });
      world.record({
        kind,
        target: step.target,
        pids: [],
        start: t0,
        end: t0 + ms,
        detail: { ...step.params },
      });
      world.onHeal(() => world.setSink(step.target, undefined));
    },
  };
}

export const sinkFail = sinkNemesis('sink-fail', 'fail', 2);
export const sinkHang = sinkNemesis('sink-hang', 'hang', 1);
export const sinkSlow = sinkNemesis('sink-slow', 'slow', 1);
