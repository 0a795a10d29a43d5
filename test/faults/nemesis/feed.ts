// The upstream feeds changing under feedsync (background), within what UPSTREAM-DIALECTS.md
// allows: the sandbox switches to another dialect profile for a while (other representations,
// Digest variants, chunking, idle connections closed; workflow events are listed out of id order
// throughout, by a seeded disorder of up to 5 places chosen at sandbox start), or answers a share of
// requests with errors (500/503/429, hangs, truncated or malformed bodies, HTML).
import type { DialectName } from '../../../src/sandbox/index.js';
import type { Nemesis } from '../world.js';

const PROFILES: DialectName[] = [
  'rails',
  'odd-syntax',
  'flaky-keepalive',
  'digest-modern',
  'digest-legacy',
  'strict-spec',
];

export const feedDialect: Nemesis = {
  kind: 'feed-dialect',
  scenarios: ['local', 'bullmq'],
  weight: 1,
  background: true,
  plan: (rng, ctx) => ({
    target: rng.pick(PROFILES),
    params: { ms: Math.min(ctx.maxFaultMs, rng.int(2000, 8000)) },
  }),
  async run(world, step) {
    const t0 = world.now();
    const ms = Number(step.params.ms);
    world.sandbox.setDialect(step.target as DialectName);
    const timer = setTimeout(() => world.sandbox.setDialect('default'), ms);
    world.record({
      kind: 'feed-dialect',
      target: step.target,
      pids: [],
      start: t0,
      end: t0 + ms,
      detail: { ...step.params },
    });
    world.onHeal(() => {
      clearTimeout(timer);
      world.sandbox.setDialect('default');
    });
  },
};

export const upstreamErrors: Nemesis = {
  kind: 'upstream-errors',
  scenarios: ['local', 'bullmq'],
  weight: 1,
  background: true,
  plan: (rng, ctx) => ({
    target: rng.pick(['all', 'feed', 'subject']),
    params: { rate: rng.int(5, 30) / 100, ms: Math.min(ctx.maxFaultMs, rng.int(1500, 6000)) },
  }),
  async run(world, step) {
    const t0 = world.now();
    const ms = Number(step.params.ms);
    world.sandbox.setFaults({
      rate: Number(step.params.rate),
      paths: step.target as 'all' | 'feed' | 'subject',
    });
    const timer = setTimeout(() => world.sandbox.setFaults({ rate: 0 }), ms);
    world.record({
      kind: 'upstream-errors',
      target: step.target,
      pids: [],
      start: t0,
      end: t0 + ms,
      detail: { ...step.params },
    });
    world.onHeal(() => {
      clearTimeout(timer);
      world.sandbox.setFaults({ rate: 0 });
    });
  },
};
