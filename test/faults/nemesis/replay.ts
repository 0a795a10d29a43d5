// `feedsync replay --sink S --source SRC --from ID` while the pollers run (issue #20): one recorded
// sink put back a seeded number of events (5..300) below the newest sampled cursor of the source;
// the source's poller re-reads the feed for that sink alone (its catch-up reader) and re-delivers
// every change after ID, then the sink rejoins the shared stream. Unlike `cursor set`, the command
// is accepted while a poller holds the source. Three ways:
//  plain:         the command alone;
//  holder-killed: the process holding the source killed with -9 right after the command printed
//                 success (mid catch-up), restarted after a seeded pause;
//  twice:         a second replay of the same sink and source at once — after the first printed
//                 success (then it must be refused with "replay is still running", or succeed if
//                 the first had already caught up), or concurrently with it (one of them may be
//                 refused as "moved while the replay was being written").
// A sink parked by queue.max_backlog refuses a replay from past its own position ("would skip
// events; replay from N or earlier"): the command is then issued again, as many events below N.
// The checker judges it: every change put back is delivered again (replay-not-honoured), copies
// after ID to that sink only (the replay copy rule), refusals only for the documented reasons.
import type { Nemesis, World } from '../world.js';
import { RECORDED_SINKS } from './sink.js';

const SOURCES = ['scheduling', 'workflow'] as const;

/** The event id `back` events below `below` (default: the newest sampled cursor of `source`). */
export function replayFrom(
  world: World,
  source: string,
  back: number,
  below = world.sampler.latest(source),
): number | undefined {
  if (below === undefined) return undefined;
  const ids = world.sandbox
    .events(source as (typeof SOURCES)[number])
    .map((e) => e.id)
    .filter((id) => id <= below)
    .sort((a, b) => a - b);
  if (ids.length === 0) return undefined;
  return ids[Math.max(0, ids.length - 1 - back)];
}

export const replayRace: Nemesis = {
  kind: 'replay',
  scenarios: ['local', 'bullmq'],
  weight: 2,
  plan: (rng) => ({
    target: rng.pick(RECORDED_SINKS),
    params: {
      source: rng.pick([...SOURCES]),
      mode: rng.pick(['plain', 'holder-killed', 'twice']),
      back: rng.int(5, 300),
      restartMs: rng.int(0, 1500),
      second: rng.chance(0.7) ? 'after' : 'concurrent',
    },
  }),
  async run(world, step) {
    const sink = step.target;
    const p = step.params;
    const source = String(p.source);
    let from = replayFrom(world, source, Number(p.back));
    if (from === undefined) return;
    const t0 = world.now();
    const pids: number[] = [];
    const outcomes: string[] = [];
    const note = (c: { ok: boolean; before?: number | null; output: string }) =>
      outcomes.push(c.ok ? `ok (was at ${c.before ?? '(none)'})` : `refused: ${refusalOf(c.output)}`);
    if (p.mode === 'twice' && p.second === 'concurrent') {
      const both = await Promise.all([
        world.replayCommand(sink, source, from),
        world.replayCommand(sink, source, from),
      ]);
      both.forEach(note);
    } else {
      let first = await world.replayCommand(sink, source, from);
      note(first);
      // A parked sink (queue.max_backlog) can only be replayed from its own position or earlier:
      // as an operator would, go back the same number of events from the position it names.
      const earlier = /would skip events; replay from (\d+) or earlier/.exec(first.output);
      if (!first.ok && earlier) {
        from = replayFrom(world, source, Number(p.back), Number(earlier[1])) ?? Number(earlier[1]);
        first = await world.replayCommand(sink, source, from);
        note(first);
      }
      if (first.ok && p.mode === 'twice') note(await world.replayCommand(sink, source, from));
      if (first.ok && p.mode === 'holder-killed') {
        // The holder of the source (local: of the store) is mid catch-up: kill it there.
        const slot = world.holderSlot(source) ?? world.pollers.find((s) => world.sup.running(s));
        const t = world.now();
        const pid = slot ? world.sup.kill9(slot) : undefined;
        if (slot && pid !== undefined) {
          pids.push(pid);
          world.record({
            kind: 'kill9',
            target: slot,
            pids: [pid],
            start: t,
            end: t,
            detail: { by: 'replay' },
          });
          if (world.scenario === 'local') world.expireLeaseOf(pid);
          await world.sleep(Number(p.restartMs));
          world.sup.start(slot);
        }
      }
    }
    world.record({
      kind: 'replay',
      target: sink,
      pids,
      start: t0,
      end: world.now(),
      detail: { ...p, from, outcomes },
    });
  },
};

/** The refusal's reason, short (the CLI's last line). */
function refusalOf(output: string): string {
  const line =
    output
      .split('\n')
      .map((l) => l.replace(/^\[(stdout|stderr)\] /, '').trim())
      .filter(Boolean)
      .at(-1) ?? '';
  return line.slice(0, 160);
}
