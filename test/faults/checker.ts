// The checker: reads a whole recorded history (types.ts) and returns every anomaly, by kind.
// Pure: no I/O, no clocks; checker.test.ts drives it with hand-made histories.
//
// Terms. A delivery is one sink call for one change (START..END, from the recorder sink). A
// delivery is *applied* when it ended ok, or when it never ended because its process died (the
// sink may or may not have applied it): both count as the sink having received the change. A
// *copy* is every application of a key to a sink after its first.
//
// Anomaly kinds:
//  lost            an expected change (a sandbox event whose key a sink's filter passes) that the
//                  sink never received (minus the events a successful `cursor reset` skipped).
//  unexpected      a sink received a change its filter excludes, or one no sandbox event made.
//  overlap         two deliveries of one subject to one sink in flight at once (any processes),
//                  unless one of them was already in flight when a fault that can cost its process
//                  its lease began (SIGSTOP of that process, Redis frozen, its Redis connections
//                  frozen or cut).
//  order           a change's FIRST application started after a newer change (feed order) of the
//                  same subject had been delivered to that sink (END before START). Copies are
//                  judged by the copy rules instead; changes a `cursor reset` skipped (which a
//                  later rewind may queue again) are not judged.
//  copy            a copy no fault explains (see COPY RULES below).
//  copy-uncounted  copies explained only by a SIGSTOP (the original in flight at the freeze) that
//                  the frozen process's feedsync_deliveries_after_lease_loss_total did not count.
//  cursor-backwards    a sampled cursor below one sampled before, with no successful cursor
//                  command in between and no Redis kill (AOF everysec may lose its last second).
//  cursor-overwritten  after a `cursor set/reset` printed success, a later sample below its
//                  forward target (a poller wrote over it).
//  rewind-not-honoured  a `cursor set` below the cursor printed success, but changes between the
//                  new and the old cursor, all delivered before the command, were never delivered
//                  again (docs/scaled-mode.md: "events after ID are queued again"): the rewind was
//                  overwritten, or the re-read pages were not queued.
//  cursor-accepted-while-held  a cursor command succeeded although the same lease holder with the
//                  same token was seen just before and just after it (it never held the source).
//  replay-not-honoured  a `feedsync replay --sink S --source SRC --from ID` printed success ("it was
//                  at B"), but a change of SRC with ID < id <= B that S's filter passes and that S
//                  had received before the command started was not delivered to S again after it
//                  started (the sink was not put back, or its catch-up skipped it). Every accepted
//                  replay is judged (a second one is accepted only once the first has caught up).
//  replay-unexplained-refusal  a replay was refused (or failed) for a reason the command does not
//                  document ("a replay is still running", "would skip events", "nothing to
//                  replay", "was moved while the replay was being written"), or as "still running"
//                  with no accepted replay of that sink and source before it. (That a refused replay
//                  changed nothing is judged through the copy rules: it explains no copy.)
//  token-regression  fencing tokens must grow with every takeover: a lease sample shows a new
//                  owner with a token not above one seen before, even across a Redis kill (a
//                  lease seen earlier that a Redis restarted from a cut AOF shows again is its
//                  state going back, not a token handed out), or a process started later delivers with a lower `context.fence`
//                  token than an earlier process did in the same scope (a sink that compares tokens,
//                  as DeliveryFence invites, would then refuse the new owner's deliveries).
//  mirror-stale    a mirror sink (sqlite or postgres, the product's own fenced sinks) ended with a subject's row
//                  not at the subject's last event in feed order (or with no row), or not deleted
//                  though the subject was: the end state a user would see is wrong. (A deleted
//                  subject is judged by its tombstone alone: a *_deleted event is final even when
//                  the feed lists a change of it after it. Subjects touched by a skipped range are
//                  not judged.)
//  stall           isolation: while one recorded sink was failing/hanging/slow, another recorded
//                  sink delivered nothing for STALL_MS although changes were queued for it (another
//                  sink had received them), with no process, Redis or store fault in that time.
//
// COPY RULES: a copy is explained by a fault when one of the key's earlier applications (p)
//  kill9           was made by the killed process and started before the kill;
//  freeze          was in flight (started before, not ended by) the SIGSTOP of its own process: allowed,
//                  but the process must count it (copy-uncounted otherwise);
//  redis-kill      was in flight at the kill or ended within REDIS_LOSS_MS before it, or started
//                  before Redis was back + GRACE_MS (a worker that went on with its slice through
//                  the restart until its next renewal found what Redis forgot: the job's lock and
//                  progress of the lost last second), as for redis-freeze;
//  redis-freeze, proxy-freeze, proxy-cut   was in flight during the fault, or ended within
//                  REDIS_LOSS_MS before it or before its end + GRACE_MS (proxy faults: only
//                  processes behind that proxy);
//  store-full, store-lock  ended (its acknowledgement was written) during the fault or GRACE_MS after;
//  crash           was made by a process that exited by itself (non-zero) after it started, unless
//                  that process had been frozen (then only the freeze rule applies) — but a local
//                  `run` frozen past its store lease exits 1 on resuming: what it delivered before
//                  the freeze, or had in flight at it (acknowledged in memory only when it resumed),
//                  counts as a crash's copies (the standby redelivers its memory window);
//  cursor          (checked first: deliberate) is of a key after the target of a successful rewind
//                  (`cursor set` below the cursor), and the copy started after the command did;
//  replay          (checked first too: deliberate) is of a key of SRC after ID to sink S, and a
//                  successful `feedsync replay --sink S --source SRC --from ID` started before the
//                  copy did. A replay of another sink explains nothing: the other sinks are untouched.
// Sink faults and feed/upstream faults explain no copy.
import type {
  CursorCommand,
  Delivery,
  ExpectedEvent,
  FaultKind,
  FaultRecord,
  History,
  MirrorRow,
  ProcessLife,
  ReplayCommand,
  SinkFilterSpec,
  SinkSpec,
} from './types.js';

export const ANOMALY_KINDS = [
  'lost',
  'unexpected',
  'overlap',
  'order',
  'copy',
  'copy-uncounted',
  'cursor-backwards',
  'cursor-overwritten',
  'rewind-not-honoured',
  'cursor-accepted-while-held',
  'replay-not-honoured',
  'replay-unexplained-refusal',
  'token-regression',
  'mirror-stale',
  'stall',
] as const;
export type AnomalyKind = (typeof ANOMALY_KINDS)[number];

export interface Anomaly {
  kind: AnomalyKind;
  sink?: string;
  key?: string;
  source?: string;
  pids?: number[];
  at?: number;
  detail: string;
}

export type CopyCause = FaultKind | 'crash' | 'none';

export interface CheckResult {
  anomalies: Anomaly[];
  counts: Record<AnomalyKind, number>;
  /** Every copy by what explains it ('none' = a `copy` anomaly). */
  copies: Partial<Record<CopyCause, number>>;
  /** Overlaps and cursor steps back that a fault permits, by fault kind. */
  permitted: { overlap: Partial<Record<string, number>>; cursorBackwards: Partial<Record<string, number>> };
  stats: { deliveries: number; applications: number; expected: number; unfinished: number };
}

/** A redis-server killed with AOF everysec may lose about its last second; slices in flight longer. */
export const REDIS_LOSS_MS = 5_000;
/** After a fault heals, an acknowledgement held up by it may still complete this much later. */
export const GRACE_MS = 2_000;
/** A fault is recorded just before its signal is sent; a START this much later still preceded it. */
export const SIGNAL_SLACK_MS = 50;
/** Isolation: this long without a delivery to a sink that had work is a stall. */
export const STALL_MS = 5_000;
/** Sink faults shorter than this are not checked for isolation. */
const STALL_MIN_FAULT_MS = STALL_MS + 1_000;

const FREEZE_LIKE: ReadonlySet<FaultKind> = new Set(['freeze', 'redis-freeze', 'proxy-freeze', 'proxy-cut']);
const PROCESS_OR_INFRA: ReadonlySet<FaultKind> = new Set([
  'kill9',
  'freeze',
  'redis-kill',
  'redis-freeze',
  'proxy-cut',
  'proxy-freeze',
  'store-full',
  'store-lock',
  'cursor',
]);
const SINK_FAULTS: ReadonlySet<FaultKind> = new Set(['sink-fail', 'sink-hang', 'sink-slow']);

/** A delivery with its end filled in (death or end of history) and whether it applied. */
interface Interval extends Delivery {
  stop: number;
  applied: boolean;
  unfinished: boolean;
}

export function passes(filter: SinkFilterSpec, e: ExpectedEvent): boolean {
  const ok = (list: string[] | undefined, value: string) =>
    !list || list.length === 0 || list.includes(value);
  return (
    ok(filter.sources, e.source) &&
    ok(filter.services, e.service) &&
    ok(filter.event_types, e.event_type) &&
    ok(filter.resource_types, e.resource_type)
  );
}

export function check(h: History): CheckResult {
  const anomalies: Anomaly[] = [];
  const add = (a: Anomaly) => anomalies.push(a);
  const events = new Map(h.events.map((e) => [e.key, e]));
  const lives = new Map<number, ProcessLife>();
  for (const p of h.processes) lives.set(p.pid, p);

  // Intervals: an unfinished delivery lasts until its process ended (or the history did).
  const intervals: Interval[] = h.deliveries.map((d) => {
    if (d.end !== undefined) return { ...d, stop: d.end, applied: d.ok === true, unfinished: false };
    const life = lives.get(d.pid);
    const stop = life?.end ?? h.tEnd;
    return { ...d, stop: Math.max(stop, d.start), applied: life?.end !== undefined, unfinished: true };
  });
  const bySinkKey = groupBy(intervals, (d) => `${d.sink}\u0000${d.key}`);
  for (const list of bySinkKey.values()) list.sort((a, b) => a.start - b.start);

  const skipped = skippedByResets(h.cursorCommands);

  const lastCursor = new Map<string, number>();
  for (const smp of [...h.cursorSamples].sort((a, b) => a.t - b.t)) lastCursor.set(smp.source, smp.value);

  // (1) lost, and unexpected.
  let expectedCount = 0;
  for (const sink of h.sinks) {
    const got = new Set<string>();
    if (sink.recorded) {
      for (const d of intervals) if (d.sink === sink.name && d.applied && !d.unfinished) got.add(d.key);
    } else for (const k of h.delivered[sink.name] ?? []) got.add(k);
    const lost: string[] = [];
    for (const e of h.events) {
      if (!passes(sink.filter, e)) continue;
      if (isSkipped(skipped, e)) continue;
      expectedCount++;
      if (!got.has(e.key)) lost.push(e.key);
    }
    for (const key of lost) {
      const e = events.get(key)!;
      const cursor = lastCursor.get(e.source);
      const where =
        cursor === undefined
          ? ''
          : cursor < e.id
            ? ` (the ${e.source} cursor ended at ${cursor}: never queued)`
            : ` (the ${e.source} cursor ended at ${cursor}, past it)`;
      add({
        kind: 'lost',
        sink: sink.name,
        key,
        source: e.source,
        detail: `${key} never reached ${sink.name}${where}`,
      });
    }
    for (const key of got) {
      const e = events.get(key);
      if (!e)
        add({
          kind: 'unexpected',
          sink: sink.name,
          key,
          detail: `${sink.name} got ${key}, which no sandbox event made`,
        });
      else if (!passes(sink.filter, e))
        add({
          kind: 'unexpected',
          sink: sink.name,
          key,
          detail: `${sink.name} got ${key}, which its filter excludes`,
        });
    }
  }

  // (2) overlap: per sink and subject, intervals in flight at once.
  const permittedOverlap: Partial<Record<string, number>> = {};
  const bySubject = groupBy(
    intervals.filter((d) => d.subject !== null),
    (d) => `${d.sink}\u0000${d.subject}`,
  );
  for (const list of bySubject.values()) {
    list.sort((a, b) => a.start - b.start);
    for (let i = 0; i < list.length; i++) {
      const a = list[i]!;
      for (let j = i + 1; j < list.length && list[j]!.start < a.stop; j++) {
        const b = list[j]!;
        if (b.start >= a.stop) break;
        const why = frozenInFlight(h.faults, a) ?? frozenInFlight(h.faults, b);
        if (why) {
          permittedOverlap[why] = (permittedOverlap[why] ?? 0) + 1;
          continue;
        }
        add({
          kind: 'overlap',
          sink: a.sink,
          key: b.key,
          pids: [a.pid, b.pid],
          at: b.start,
          detail: `${a.sink} ${a.subject}: ${a.key} (pid ${a.pid}, ${fmt(a.start, h)}..${fmt(a.stop, h)}) overlaps ${b.key} (pid ${b.pid}, ${fmt(b.start, h)}..${fmt(b.stop, h)})`,
        });
      }
    }
  }

  // (4) copies, before (3): order judges first applications only.
  const copies: Partial<Record<CopyCause, number>> = {};
  const frozenOriginals = new Map<string, Set<string>>(); // "pid sink" → keys of in-flight originals
  let applications = 0;
  const firstApplication = new Map<string, Interval>(); // sink+key → first application
  for (const [sinkKey, list] of bySinkKey) {
    const applied = list.filter((d) => d.applied);
    applications += applied.length;
    if (applied.length === 0) continue;
    firstApplication.set(sinkKey, applied[0]!);
    for (let i = 1; i < applied.length; i++) {
      const c = applied[i]!;
      const cause = explainCopy(h, applied.slice(0, i), c, lives);
      copies[cause.kind] = (copies[cause.kind] ?? 0) + 1;
      if (cause.kind === 'freeze' && cause.original) {
        const k = `${cause.original.pid} ${c.sink}`;
        const set = frozenOriginals.get(k) ?? new Set<string>();
        set.add(cause.original.key);
        frozenOriginals.set(k, set);
      }
      if (cause.kind === 'none') {
        const prev = applied[i - 1]!;
        add({
          kind: 'copy',
          sink: c.sink,
          key: c.key,
          pids: [prev.pid, c.pid],
          at: c.start,
          detail: `${c.key} to ${c.sink} again: pid ${prev.pid} at ${fmt(prev.start, h)}, then pid ${c.pid} at ${fmt(c.start, h)}; faults around: ${faultsAround(h, prev.start - 1_000, c.start) || 'none'}`,
        });
      }
    }
  }
  for (const [k, keys] of frozenOriginals) {
    const [pidText, sink] = k.split(' ') as [string, string];
    const pid = Number(pidText);
    const counted = h.afterLeaseLoss
      .filter((c) => c.pid === pid && c.sink === sink)
      .reduce((n, c) => n + c.count, 0);
    if (counted < keys.size)
      add({
        kind: 'copy-uncounted',
        sink,
        pids: [pid],
        detail: `pid ${pid} was frozen with ${keys.size} deliveries to ${sink} in flight that were delivered again (e.g. ${[...keys].slice(0, 3).join(', ')}); feedsync_deliveries_after_lease_loss_total counted ${counted}`,
      });
  }

  // (3) order: a first application starting after a newer change of its subject was delivered.
  // Events a `cursor reset` skipped are left out: a later rewind may queue them again, after newer ones.
  const firstsBySubject = groupBy(
    [...firstApplication.values()].filter(
      (d) => d.subject !== null && events.has(d.key) && !isSkipped(skipped, events.get(d.key)!),
    ),
    (d) => `${d.sink}\u0000${d.subject}`,
  );
  for (const [subjectKey, firsts] of firstsBySubject) {
    const oks = (bySubject.get(subjectKey) ?? []).filter((d) => d.ok === true && events.has(d.key));
    for (const o of firsts) {
      const po = events.get(o.key)!.pos;
      const newer = oks.find(
        (n) => n.key !== o.key && events.get(n.key)!.pos > po && n.stop <= o.start && n.source === o.source,
      );
      if (newer)
        add({
          kind: 'order',
          sink: o.sink,
          key: o.key,
          pids: [newer.pid, o.pid],
          at: o.start,
          detail: `${o.sink} ${o.subject}: ${o.key} (feed position ${po}) first delivered at ${fmt(o.start, h)} by pid ${o.pid}, after the newer ${newer.key} (position ${events.get(newer.key)!.pos}) was delivered at ${fmt(newer.stop, h)} by pid ${newer.pid}`,
        });
    }
  }

  // (5) cursors.
  const permittedBack: Partial<Record<string, number>> = {};
  const okCommands = h.cursorCommands.filter((c) => c.ok);
  const samplesBySource = groupBy(h.cursorSamples, (s) => s.source);
  for (const [source, samples] of samplesBySource) {
    samples.sort((a, b) => a.t - b.t);
    const cmds = okCommands.filter((c) => c.source === source).sort((a, b) => a.start - b.start);
    let high: { value: number; t: number } | undefined;
    let floor: { value: number; cmd: CursorCommand } | undefined; // a forward target set by a command
    let nextCmd = 0;
    for (const s of samples) {
      // Samples taken while a command ran are ambiguous; after it, its target is the new baseline.
      while (nextCmd < cmds.length && cmds[nextCmd]!.end <= s.t) {
        const c = cmds[nextCmd++]!;
        high = c.after !== undefined ? { value: c.after, t: c.end } : undefined;
        floor =
          c.after !== undefined && c.before !== undefined && c.before !== null && c.after > c.before
            ? { value: c.after, cmd: c }
            : undefined;
      }
      if (cmds.some((c) => c.start <= s.t && s.t < c.end)) continue;
      if (high && s.value < high.value) {
        const redisKill = h.faults.find(
          (f) => f.kind === 'redis-kill' && f.start >= high!.t - REDIS_LOSS_MS && f.start <= s.t,
        );
        if (redisKill) permittedBack['redis-kill'] = (permittedBack['redis-kill'] ?? 0) + 1;
        else if (floor && s.value < floor.value)
          add({
            kind: 'cursor-overwritten',
            source,
            at: s.t,
            detail: `${source}: \`${floor.cmd.args.join(' ')}\` printed success (cursor ${floor.cmd.before} → ${floor.cmd.after}) at ${fmt(floor.cmd.end, h)}, then the cursor was ${s.value} at ${fmt(s.t, h)}`,
          });
        else
          add({
            kind: 'cursor-backwards',
            source,
            at: s.t,
            detail: `${source}: cursor ${high.value} at ${fmt(high.t, h)}, then ${s.value} at ${fmt(s.t, h)}; faults around: ${faultsAround(h, high.t - 1_000, s.t) || 'none'}`,
          });
        high = { value: s.value, t: s.t };
        floor = undefined;
      } else if (!high || s.value > high.value) high = { value: s.value, t: s.t };
    }
  }
  // A rewind that printed success must be honoured: what it put back is delivered again.
  for (const c of okCommands) {
    if (c.after === undefined || c.before === undefined || c.before === null || c.after >= c.before) continue;
    if (okCommands.some((o) => o !== c && o.source === c.source && o.start > c.start)) continue;
    let stale = 0;
    let example = '';
    for (const e of h.events) {
      if (e.source !== c.source || e.id <= c.after || e.id > c.before) continue;
      for (const sink of h.sinks) {
        if (!sink.recorded || !passes(sink.filter, e)) continue;
        const list = (bySinkKey.get(`${sink.name}\u0000${e.key}`) ?? []).filter((d) => d.applied);
        if (list.length === 0 || list.some((d) => d.stop >= c.start)) continue;
        stale++;
        example ||= `${e.key} to ${sink.name}`;
      }
    }
    if (stale > 0)
      add({
        kind: 'rewind-not-honoured',
        source: c.source,
        at: c.end,
        detail: `\`${c.args.join(' ')}\` printed success (cursor ${c.before} → ${c.after}) at ${fmt(c.end, h)}, but ${stale} (sink, change) pairs it put back were never delivered again (e.g. ${example})`,
      });
  }
  for (const c of okCommands) {
    const scope = h.scenario === 'local' ? '*' : c.source;
    const samples = h.leaseSamples.filter((s) => s.source === scope);
    const before = last(samples.filter((s) => s.t <= c.start));
    const after = samples.filter((s) => s.t >= c.end).sort((a, b) => a.t - b.t)[0];
    if (
      before?.owner &&
      after?.owner &&
      before.owner === after.owner &&
      before.token === after.token &&
      before.token !== null
    )
      add({
        kind: 'cursor-accepted-while-held',
        source: c.source,
        at: c.start,
        detail: `\`${c.args.join(' ')}\` succeeded at ${fmt(c.start, h)}..${fmt(c.end, h)} while ${before.owner} held the lease with token ${before.token} before and after it`,
      });
  }

  // A replay that printed success must be honoured: what it put back reaches its sink again.
  const replays = h.replays ?? [];
  const appliedBySinkKey = new Map<string, { start: number; stop: number }[]>();
  for (const [k, list] of bySinkKey)
    appliedBySinkKey.set(
      k,
      list.filter((d) => d.applied),
    );
  for (const { replay: r, owed } of replayOwed(h.events, h.sinks, replays, skipped, appliedBySinkKey))
    add({
      kind: 'replay-not-honoured',
      sink: r.sink,
      source: r.source,
      key: owed[0],
      at: r.end,
      detail: `\`feedsync replay --sink ${r.sink} --source ${r.source} --from ${r.from}\` printed success (it was at ${r.before}) at ${fmt(r.end, h)}, but ${owed.length} changes it put back were never delivered to ${r.sink} again (e.g. ${owed.slice(0, 5).join(', ')})`,
    });
  // A refused replay: only for a documented reason.
  for (const r of replays) {
    if (r.ok) continue;
    const what = `\`feedsync replay --sink ${r.sink} --source ${r.source} --from ${r.from}\` (${fmt(r.start, h)}..${fmt(r.end, h)})`;
    const reason = REPLAY_REFUSALS.find((x) => x.test(r.output));
    if (!reason)
      add({
        kind: 'replay-unexplained-refusal',
        sink: r.sink,
        source: r.source,
        at: r.start,
        detail: `${what} failed with no documented refusal: ${lastOutputLine(r.output)}`,
      });
    else if (
      reason === REPLAY_RUNNING &&
      !replays.some((o) => o.ok && o.sink === r.sink && o.source === r.source && o.start < r.end)
    )
      add({
        kind: 'replay-unexplained-refusal',
        sink: r.sink,
        source: r.source,
        at: r.start,
        detail: `${what} was refused as "still running", but no replay of ${r.sink} from ${r.source} had been accepted: ${lastOutputLine(r.output)}`,
      });
  }

  // Fencing tokens only grow.
  for (const [scope, samples] of groupBy(h.leaseSamples, (s) => s.source)) {
    samples.sort((a, b) => a.t - b.t);
    let max: { token: number; owner: string; t: number } | undefined;
    let prevOwner: string | null = null;
    const seen = new Set<string>();
    for (const s of samples) {
      if (s.owner === null || s.token === null) {
        prevOwner = null;
        continue;
      }
      // Even across a Redis that lost its last writes (src/lease/redis-scripts.ts NEXT_TOKEN): a token
      // handed out again is what made the mirrors refuse the legitimate writer. A lease seen before
      // (same owner, same token) is Redis' state going back with its AOF, not a token handed out.
      const pair = `${s.owner} ${s.token}`;
      const handedOut = !seen.has(pair);
      seen.add(pair);
      if (max && handedOut && s.owner !== prevOwner && s.owner !== max.owner && s.token <= max.token) {
        add({
          kind: 'token-regression',
          source: scope,
          at: s.t,
          detail: `lease ${scope}: ${s.owner} holds it with token ${s.token} at ${fmt(s.t, h)}, but ${max.owner} held token ${max.token} at ${fmt(max.t, h)}`,
        });
      }
      if (!max || s.token > max.token) max = { token: s.token, owner: s.owner, t: s.t };
      prevOwner = s.owner;
    }
  }
  {
    const firstFence = new Map<string, { pid: number; token: number; t: number }>(); // scope+pid → first fenced delivery
    for (const d of [...intervals].sort((a, b) => a.start - b.start)) {
      if (!d.fence) continue;
      const k = `${d.fence.scope}\u0000${d.pid}`;
      if (!firstFence.has(k)) firstFence.set(k, { pid: d.pid, token: d.fence.token, t: d.start });
    }
    const byScope = groupBy(
      [...firstFence].map(([k, v]) => ({ scope: k.split('\u0000')[0]!, ...v })),
      (x) => x.scope,
    );
    for (const [scope, list] of byScope) {
      for (const later of list) {
        const started = lives.get(later.pid)?.start ?? later.t;
        const older = list.find((o) => o.pid !== later.pid && o.t < started && o.token >= later.token);
        if (older)
          add({
            kind: 'token-regression',
            source: scope,
            pids: [older.pid, later.pid],
            at: later.t,
            detail: `fence ${scope}: pid ${later.pid} (started ${fmt(started, h)}) delivers with token ${later.token}, but pid ${older.pid} had delivered with token ${older.token} at ${fmt(older.t, h)}`,
          });
      }
    }
  }

  // Each mirror's end state: every subject at its last event in feed order, or deleted.
  for (const [sink, rows] of Object.entries(h.mirrors))
    for (const a of mirrorStale(h.events, rows, skipped)) add({ ...a, detail: `${sink}: ${a.detail}` });

  // (6) isolation: a sink fault on one recorded sink must not stall another.
  const recorded = h.sinks.filter((s) => s.recorded).map((s) => s.name);
  const firstStart = new Map<string, number>();
  for (const [k, list] of bySinkKey) firstStart.set(k, list[0]!.start);
  for (const f of h.faults) {
    if (!SINK_FAULTS.has(f.kind) || f.end - f.start < STALL_MIN_FAULT_MS) continue;
    for (const other of recorded) {
      if (other === f.target) continue;
      const ends = intervals
        .filter((d) => d.sink === other && d.applied && !d.unfinished)
        .map((d) => d.stop)
        .sort((a, b) => a - b);
      let prev = f.start + 1_000;
      const gaps: [number, number][] = [];
      for (const t of [...ends.filter((t) => t > prev && t < f.end), f.end]) {
        if (t - prev >= STALL_MS) gaps.push([prev, t]);
        prev = t;
      }
      for (const [g0, g1] of gaps) {
        if (
          h.faults.some(
            (x) => PROCESS_OR_INFRA.has(x.kind) && x.start <= g1 + GRACE_MS && x.end >= g0 - GRACE_MS,
          )
        )
          continue;
        // Queued for `other` by g0: some sink had started delivering it, and `other` had not received it yet.
        const sink = h.sinks.find((s) => s.name === other)!;
        const owed = h.events.find((e) => {
          if (!passes(sink.filter, e)) return false;
          const mine = firstApplication.get(`${other}\u0000${e.key}`);
          if (mine && mine.start < g1) return false;
          return h.sinks.some(
            (s) => s.name !== other && (firstStart.get(`${s.name}\u0000${e.key}`) ?? Infinity) < g0,
          );
        });
        if (owed)
          add({
            kind: 'stall',
            sink: other,
            at: g0,
            detail: `${other} delivered nothing for ${Math.round(g1 - g0)} ms (${fmt(g0, h)}..${fmt(g1, h)}) while ${f.kind} hit ${f.target}, though ${owed.key} was queued for it`,
          });
      }
    }
  }

  const counts = Object.fromEntries(ANOMALY_KINDS.map((k) => [k, 0])) as Record<AnomalyKind, number>;
  for (const a of anomalies) counts[a.kind]++;
  return {
    anomalies,
    counts,
    copies,
    permitted: { overlap: permittedOverlap, cursorBackwards: permittedBack },
    stats: {
      deliveries: intervals.length,
      applications,
      expected: expectedCount,
      unfinished: intervals.filter((d) => d.unfinished).length,
    },
  };
}

/** Subjects whose mirror row is not what the feed says (see mirror-stale). */
export function mirrorStale(
  events: ExpectedEvent[],
  mirror: Record<string, MirrorRow>,
  skipped: Map<string, [number, number][]>,
): Anomaly[] {
  const lastOf = new Map<string, ExpectedEvent>();
  const deleted = new Set<string>();
  const touchedBySkip = new Set<string>();
  for (const e of events) {
    if (e.subject === null) continue;
    if (isSkipped(skipped, e)) touchedBySkip.add(e.subject);
    if (e.event_type.endsWith('_deleted')) deleted.add(e.subject);
    const prev = lastOf.get(e.subject);
    if (!prev || e.pos > prev.pos) lastOf.set(e.subject, e);
  }
  const out: Anomaly[] = [];
  for (const [subject, e] of lastOf) {
    if (touchedBySkip.has(subject)) continue;
    const row = mirror[subject];
    const gone = deleted.has(subject);
    if (row && (gone ? row.deleted : row.last === e.id && !row.deleted)) continue;
    out.push({
      kind: 'mirror-stale',
      source: e.source,
      key: e.key,
      detail: !row
        ? `the mirror has no row for ${subject} (last event ${e.key})`
        : gone
          ? `the mirror's row for ${subject} is not deleted (at event ${row.last}), but the subject was`
          : `the mirror's row for ${subject} is at event ${row.last}${row.deleted ? ' (deleted)' : ''}, the feed's last event of it is ${e.id}`,
    });
  }
  return out;
}

/** Which fault explains copy `c` given the key's earlier applications (most specific first). */
function explainCopy(
  h: History,
  earlier: Interval[],
  c: Interval,
  lives: Map<number, ProcessLife>,
): { kind: CopyCause; original?: Interval } {
  const found: { kind: CopyCause; original: Interval; rank: number }[] = [];
  for (const p of earlier) {
    for (const f of h.faults) {
      // A START a few ms after the fault's recorded start was made before the signal landed.
      const inFlightAt = (t: number) => p.start < t + SIGNAL_SLACK_MS && p.stop > t;
      switch (f.kind) {
        case 'kill9':
          if (f.pids.includes(p.pid) && p.start <= f.start)
            found.push({ kind: 'kill9', original: p, rank: 0 });
          break;
        case 'freeze':
          // The local queue: a `run` frozen past its store lease exits 1 when it resumes, and the
          // standby redelivers what it held in memory, as after a crash (docs/guarantees.md) —
          // also what was in flight at the freeze and acknowledged in memory only on resuming
          // (the store still its own at that instant), which therefore goes uncounted.
          if (
            h.scenario === 'local' &&
            f.pids.includes(p.pid) &&
            p.start < f.start + SIGNAL_SLACK_MS &&
            lives.get(p.pid)?.how === 'exited' &&
            lives.get(p.pid)?.code === 1
          )
            found.push({ kind: 'crash', original: p, rank: 5 });
          else if (f.pids.includes(p.pid) && inFlightAt(f.start) && c.start > f.start)
            found.push({ kind: 'freeze', original: p, rank: 1 });
          break;
        case 'redis-kill':
          if (
            (inFlightAt(f.start) ||
              (p.stop <= f.start && p.stop >= f.start - REDIS_LOSS_MS) ||
              (p.start >= f.start && p.start < f.end + GRACE_MS)) &&
            c.start >= f.start
          )
            found.push({ kind: 'redis-kill', original: p, rank: 2 });
          break;
        case 'redis-freeze':
        case 'proxy-freeze':
        case 'proxy-cut': {
          if (f.kind !== 'redis-freeze' && f.pids.length > 0 && !f.pids.includes(p.pid)) break;
          const during = p.start < f.end + GRACE_MS && p.stop > f.start - REDIS_LOSS_MS;
          if (during && c.start >= f.start) found.push({ kind: f.kind, original: p, rank: 3 });
          break;
        }
        case 'store-full':
        case 'store-lock':
          if (
            (inFlightAt(f.start) || (p.stop >= f.start - 100 && p.stop <= f.end + GRACE_MS)) &&
            c.start >= f.start
          )
            found.push({ kind: f.kind, original: p, rank: 4 });
          break;
        default:
          break;
      }
    }
    // A process that exited by itself (not after a freeze: that is judged by the freeze rule).
    const life = lives.get(p.pid);
    if (
      life?.how === 'exited' &&
      life.code !== 0 &&
      life.end !== undefined &&
      p.start <= life.end &&
      !h.faults.some((f) => f.kind === 'freeze' && f.pids.includes(p.pid))
    )
      found.push({ kind: 'crash', original: p, rank: 5 });
  }
  const e = { source: c.source, id: c.id };
  for (const cmd of h.cursorCommands) {
    if (
      !cmd.ok ||
      cmd.source !== e.source ||
      cmd.after === undefined ||
      cmd.before === undefined ||
      cmd.before === null
    )
      continue;
    // Every event after the new cursor is queued again (also those above the old cursor that the
    // workflow rule had remembered as seen: the command clears seen_above).
    if (cmd.after < cmd.before && e.id > cmd.after && c.start >= cmd.start)
      found.push({ kind: 'cursor', original: earlier[earlier.length - 1]!, rank: -1 });
  }
  // A replay of this sink put it back before this key: its changes after `from` come again.
  for (const r of h.replays ?? []) {
    if (r.ok && r.sink === c.sink && r.source === e.source && r.from < e.id && r.start <= c.start)
      found.push({ kind: 'replay', original: earlier[earlier.length - 1]!, rank: -1 });
  }
  if (found.length === 0) return { kind: 'none' };
  found.sort((a, b) => a.rank - b.rank);
  return found[0]!;
}

/** The fault that caught delivery `d` in flight and may have cost its process its lease. */
function frozenInFlight(faults: FaultRecord[], d: Interval): string | undefined {
  for (const f of faults) {
    if (!FREEZE_LIKE.has(f.kind)) continue;
    if (f.kind !== 'redis-freeze' && f.pids.length > 0 && !f.pids.includes(d.pid)) continue;
    if (d.start < f.start + SIGNAL_SLACK_MS && d.stop > f.start) return f.kind;
  }
  return undefined;
}

const REPLAY_RUNNING = /replay is still running/;
/** The refusals `feedsync replay` documents (src/queue/sink-positions.ts, the drivers' positions-admin). */
const REPLAY_REFUSALS: readonly RegExp[] = [
  REPLAY_RUNNING,
  /would skip events/,
  /nothing to replay/,
  /was moved while the replay was being written/,
];

/**
 * Per accepted replay, the keys it put back and that its sink has not received again since it
 * started: changes of its source with from < id <= before (the position it printed) that the
 * sink's filter passes, outside ranges a `cursor reset` skipped, applied (`applied`: by
 * sink + NUL + key, the applications) and settled before the command started, and with no
 * application starting at or after its start. Only recorded sinks are judged.
 */
export function replayOwed(
  events: readonly ExpectedEvent[],
  sinks: readonly SinkSpec[],
  replays: readonly ReplayCommand[],
  skipped: Map<string, [number, number][]>,
  applied: Map<string, { start: number; stop: number }[]>,
): { replay: ReplayCommand; owed: string[] }[] {
  const out: { replay: ReplayCommand; owed: string[] }[] = [];
  for (const r of replays) {
    if (!r.ok || r.before === undefined || r.before === null) continue;
    const sink = sinks.find((s) => s.name === r.sink);
    if (!sink?.recorded) continue;
    const owed: string[] = [];
    for (const e of events) {
      if (e.source !== r.source || e.id <= r.from || e.id > r.before) continue;
      if (!passes(sink.filter, e) || isSkipped(skipped, e)) continue;
      const list = applied.get(`${sink.name}\u0000${e.key}`) ?? [];
      if (!list.some((d) => d.stop <= r.start)) continue;
      if (list.some((d) => d.start >= r.start)) continue;
      owed.push(e.key);
    }
    if (owed.length > 0) out.push({ replay: r, owed });
  }
  return out;
}

function lastOutputLine(text: string): string {
  return (
    text
      .split('\n')
      .map((l) => l.replace(/^\[(stdout|stderr)\] /, '').trim())
      .filter(Boolean)
      .at(-1) ?? '(no output)'
  ).slice(0, 300);
}

/** Id ranges a successful forward `cursor reset/set` skipped, per source: (before, after]. */
export function skippedByResets(cmds: CursorCommand[]): Map<string, [number, number][]> {
  const out = new Map<string, [number, number][]>();
  for (const c of cmds) {
    if (!c.ok || c.after === undefined) continue;
    const before = c.before ?? 0;
    if (c.after <= before) continue;
    const list = out.get(c.source) ?? [];
    list.push([before, c.after]);
    out.set(c.source, list);
  }
  return out;
}

export function isSkipped(skipped: Map<string, [number, number][]>, e: ExpectedEvent): boolean {
  return (skipped.get(e.source) ?? []).some(([lo, hi]) => e.id > lo && e.id <= hi);
}

function faultsAround(h: History, from: number, to: number, limit = 8): string {
  const around = h.faults.filter((f) => f.start <= to && f.end >= from);
  const shown = around
    .slice(0, limit)
    .map(
      (f) =>
        `${f.kind}(${f.target}${f.pids.length ? ` pid ${f.pids.join(',')}` : ''}) ${fmt(f.start, h)}..${fmt(f.end, h)}`,
    );
  return shown.join(', ') + (around.length > limit ? `, … ${around.length - limit} more` : '');
}

/** A time as seconds since the run started. */
function fmt(t: number, h: History): string {
  return `+${((t - h.t0) / 1000).toFixed(3)}s`;
}

function groupBy<T>(items: Iterable<T>, key: (t: T) => string): Map<string, T[]> {
  const m = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    const list = m.get(k);
    if (list) list.push(item);
    else m.set(k, [item]);
  }
  return m;
}

function last<T>(list: T[]): T | undefined {
  return list[list.length - 1];
}

/** A short human summary of a result: anomaly counts, copies by cause, examples. */
export function describeResult(r: CheckResult, examples = 5): string {
  const lines: string[] = [];
  const counts = Object.entries(r.counts).filter(([, n]) => n > 0);
  lines.push(`anomalies: ${counts.length ? counts.map(([k, n]) => `${k} ${n}`).join(', ') : 'none'}`);
  lines.push(
    `copies by cause: ${
      Object.entries(r.copies)
        .map(([k, n]) => `${k} ${n}`)
        .join(', ') || 'none'
    }; permitted overlaps: ${
      Object.entries(r.permitted.overlap)
        .map(([k, n]) => `${k} ${n}`)
        .join(', ') || 'none'
    }; permitted cursor steps back: ${
      Object.entries(r.permitted.cursorBackwards)
        .map(([k, n]) => `${k} ${n}`)
        .join(', ') || 'none'
    }`,
  );
  lines.push(
    `deliveries ${r.stats.deliveries}, applications ${r.stats.applications}, expected ${r.stats.expected}, unfinished ${r.stats.unfinished}`,
  );
  for (const kind of ANOMALY_KINDS) {
    const of = r.anomalies.filter((a) => a.kind === kind);
    for (const a of of.slice(0, examples)) lines.push(`  [${kind}] ${a.detail}`);
    if (of.length > examples) lines.push(`  [${kind}] … and ${of.length - examples} more`);
  }
  return lines.join('\n');
}
