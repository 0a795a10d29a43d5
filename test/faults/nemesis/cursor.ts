// `feedsync cursor set|reset` racing the pollers. Three ways:
//  held:   issued while the pollers run: expected to be refused (a poller holds the source);
//  killed: every poller killed with -9, the command issued at once and retried until it is accepted
//          (the dead holder's lease must expire first, bullmq) while the pollers restart after a
//          seeded pause: the command and the restarted pollers race for the source;
//  frozen: every poller frozen (SIGSTOP) past its lease, the command issued (it should succeed),
//          and the pollers resumed after it printed success, holder or standby first: a resumed
//          poller must not write over what the command wrote.
// The command is a rewind (`cursor set SOURCE ID` a seeded number of events below the sampled
// cursor) or `cursor reset SOURCE --to latest`. Success is judged by the checker (a printed
// success never overwritten, a rewind honoured, never accepted while a live holder kept its lease).
import type { Nemesis, World } from '../world.js';

const SOURCES = ['scheduling', 'workflow'];

function commandArgs(world: World, source: string, action: string, rewindBy: number): string[] | undefined {
  if (action === 'latest') return ['cursor', 'reset', source, '--to', 'latest'];
  const cursor = world.sampler.latest(source);
  if (cursor === undefined) return undefined;
  const ids = world.sandbox
    .events(source as 'scheduling' | 'workflow')
    .map((e) => e.id)
    .filter((id) => id <= cursor);
  if (ids.length === 0) return undefined;
  return ['cursor', 'set', source, String(ids[Math.max(0, ids.length - 1 - rewindBy)])];
}

export const cursorRace: Nemesis = {
  kind: 'cursor',
  scenarios: ['local', 'bullmq'],
  weight: 2,
  plan(rng, ctx) {
    const lease = ctx.scenario === 'local' ? ctx.timing.localLeaseMs : ctx.timing.leaseTtlMs;
    const modes = ['held', 'killed', ...(lease + 2_000 <= ctx.maxFaultMs ? ['frozen'] : [])];
    return {
      target: rng.pick(SOURCES),
      params: {
        mode: rng.pick(modes),
        action: rng.chance(0.6) ? 'rewind' : 'latest',
        rewindBy: rng.int(5, 150),
        restartMs: rng.int(0, 2000),
        resume: rng.pick(['holder-first', 'standby-first']),
      },
    };
  },
  async run(world, step) {
    const source = step.target;
    const p = step.params;
    const args = commandArgs(world, source, String(p.action), Number(p.rewindBy));
    if (!args) return;
    const t0 = world.now();
    const outcomes: string[] = [];
    const pids: number[] = [];
    const once = async () => {
      // A rewind is recomputed from the newest cursor sampled.
      const a =
        p.action === 'rewind' ? (commandArgs(world, source, 'rewind', Number(p.rewindBy)) ?? args) : args;
      const c = await world.cursorCommand(a);
      outcomes.push(c.ok ? `ok ${c.before}→${c.after}` : 'refused');
      return c.ok;
    };
    if (p.mode === 'held') {
      await once();
    } else if (p.mode === 'killed') {
      const killedAt = world.now();
      for (const slot of world.pollers) {
        const pid = world.sup.kill9(slot);
        if (pid === undefined) continue;
        pids.push(pid);
        world.record({
          kind: 'kill9',
          target: slot,
          pids: [pid],
          start: killedAt,
          end: killedAt,
          detail: { by: 'cursor' },
        });
        if (world.scenario === 'local') world.expireLeaseOf(pid);
      }
      const restart = (async () => {
        await world.sleep(Number(p.restartMs));
        for (const slot of world.pollers) world.sup.start(slot);
      })();
      const deadline = Date.now() + world.timing.leaseTtlMs + 4_000;
      while (!(await once()) && Date.now() < deadline) await world.sleep(300);
      await restart;
    } else {
      const frozenAt = world.now();
      const frozen: { slot: string; pid: number }[] = [];
      const holder = world.holderSlot(source);
      for (const slot of world.pollers) {
        const pid = world.sup.freeze(slot);
        if (pid !== undefined) frozen.push({ slot, pid });
      }
      pids.push(...frozen.map((f) => f.pid));
      const lease = world.scenario === 'local' ? world.timing.localLeaseMs : world.timing.leaseTtlMs;
      await world.sleep(lease + 500);
      for (let i = 0; i < 3 && !(await once()); i++) await world.sleep(500);
      const order = [...frozen].sort((a, b) =>
        (a.slot === holder) === (b.slot === holder)
          ? 0
          : (a.slot === holder) === (p.resume === 'holder-first')
            ? -1
            : 1,
      );
      for (const [i, f] of order.entries()) {
        if (i > 0) await world.sleep(1_500);
        world.sup.thaw(f.slot);
        world.record({
          kind: 'freeze',
          target: f.slot,
          pids: [f.pid],
          start: frozenAt,
          end: world.now(),
          detail: { by: 'cursor' },
        });
      }
    }
    world.record({
      kind: 'cursor',
      target: source,
      pids,
      start: t0,
      end: world.now(),
      detail: { ...p, command: args.join(' '), outcomes },
    });
  },
};
