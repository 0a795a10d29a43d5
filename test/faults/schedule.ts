// A seed → a reproducible list of (time, fault, target, params). `FAULT_SEED=n` replays a run:
// the same list, the same sandbox (backlog, workflow disorder), the same sink behaviours. (The
// processes' own timing is not seeded: a replay injects the same faults at the same nominal
// moments, which is what makes a failure reproducible in practice.)
import { deriveSeed, Rng } from '../../src/sandbox/prng.js';
import { NEMESES } from './nemesis/index.js';
import type { FaultKind } from './types.js';
import type { Nemesis, PlanContext, Step } from './world.js';

export interface ScheduleOptions {
  /** How many faults. */
  faults: number;
  /** Kinds that must appear (each group: at least one of its kinds), when available. */
  require?: FaultKind[][];
  /** Only these kinds. */
  kinds?: FaultKind[];
  /** Pause between two faults, ms. */
  gapMs?: [number, number];
}

export function makeSchedule(seed: number, ctx: PlanContext, opts: ScheduleOptions): Step[] {
  const rng = new Rng(deriveSeed(seed, 100));
  const pool = NEMESES.filter(
    (n) =>
      n.scenarios.includes(ctx.scenario) &&
      (!opts.kinds || opts.kinds.includes(n.kind)) &&
      (n.available?.(ctx) ?? true),
  );
  if (pool.length === 0) throw new Error(`no fault kinds for ${ctx.scenario}`);
  const chosen: Nemesis[] = [];
  for (const group of opts.require ?? []) {
    const candidates = pool.filter((n) => group.includes(n.kind));
    if (candidates.length > 0 && chosen.length < opts.faults) chosen.push(weighted(rng, candidates));
  }
  while (chosen.length < opts.faults) chosen.push(weighted(rng, pool));
  rng.shuffle(chosen);
  const [gapMin, gapMax] = opts.gapMs ?? [300, 2000];
  let at = 0;
  return chosen.map((n) => {
    at += rng.int(gapMin, gapMax);
    const { target, params } = n.plan(rng, ctx);
    return { at, kind: n.kind, target, params };
  });
}

function weighted(rng: Rng, items: readonly Nemesis[]): Nemesis {
  const total = items.reduce((s, n) => s + n.weight, 0);
  let x = rng.next() * total;
  for (const n of items) {
    x -= n.weight;
    if (x < 0) return n;
  }
  return items[items.length - 1]!;
}

export function formatSchedule(steps: readonly Step[]): string {
  return steps
    .map(
      (s, i) =>
        `  ${String(i + 1).padStart(2)}. +${(s.at / 1000).toFixed(1)}s ${s.kind} → ${s.target} ${Object.entries(
          s.params,
        )
          .map(([k, v]) => `${k}=${v}`)
          .join(' ')}`,
    )
    .join('\n');
}
