// Per-sink positions: the model both queue drivers implement (docs/sink-positions.md).
//
// A source's feed is the log; every sink has its own position in it. Sinks at the head share the
// source's poll: one read, one commit queues a page for every live sink. A sink whose queued,
// undelivered changes reach its bound (`max_backlog`) is *parked* inside that page commit: the
// page is not queued for it, its position stays where the page began, and the shared poll goes on
// for the others at full speed. What a parked sink costs is bounded: its position, plus the ids
// the shared poll passes for it (8 bytes each, at most MAX_PENDING_IDS), which its catch-up must
// see again (any it does not see is reported as lost upstream, never skipped silently).
//
// Once a parked sink has delivered what it had queued, the source's poller reads the feed from
// the sink's own position (catch-up, pipeline/catch-up.ts), one page at a time while the sink's
// backlog stays below CATCH_UP_WINDOW, and queues for it only the events the shared stream has
// already passed. When its position covers the shared one it rejoins the shared stream in the same
// commit, so the hand-over has no gap (events beyond the shared position come with the shared
// poll) and no copy (events behind it came with the catch-up). A sink added with `start_from` and
// a `feedsync replay` use the same path: they put the sink at a position and let it catch up.
//
// Every write is fenced like a page commit (the source's lease, checked inside the write) and a
// catch-up commit also by the sink's generation, which every replay bumps.
import type { FeedsyncConfig, SinkFilter } from '../config/types.js';
import type { Logger } from 'pino';
import { FeedsyncError } from '../core/errors.js';
import type { PipelineEvents } from '../core/events.js';
import { wantsSource } from '../sinks/filter.js';
import type { FeedPosition, LaggingSink, LostUpstream } from './queue.js';

export type LagReason = 'parked' | 'backfill' | 'replay';

/** A sink as producers see it. */
export interface ProducerSink {
  name: string;
  filter: SinkFilter;
  /** Parked when this many of its changes wait undelivered (undefined: never). */
  maxBacklog?: number;
  /** Where it starts when added to a source that already has a cursor (undefined: from now on). */
  startFrom?: 'earliest' | number;
}

export function producerSinks(config: FeedsyncConfig): ProducerSink[] {
  return config.sinks.map((s) => ({
    name: s.name,
    filter: s.filter,
    maxBacklog: s.max_backlog ?? config.queue.max_backlog,
    ...(s.start_from !== undefined ? { startFrom: s.start_from } : {}),
  }));
}

/** Ids kept per parked (source, sink): ~8 MB at most in Redis; past it the lost-upstream check is partial. */
export const MAX_PENDING_IDS = 1_000_000;

/** Lost ids kept for `status` per (source, sink): the first ones of the last loss (logs name up to this many too). */
export const LOST_IDS_KEPT = 100;

/** A catching-up sink gets its next page only while fewer changes than this wait for it. */
export function catchUpWindow(bound: number): number {
  return Math.min(bound, Math.max(50, Math.min(1_000, Math.floor(bound / 2))));
}

/** Whether event `id` is behind `position` (the stream at that position has passed it). */
export function isBehind(position: FeedPosition, id: number): boolean {
  return id <= position.cursor || position.seenAbove.includes(id);
}

/**
 * Whether `a` and `b` are the same position: the same cursor and the same set of ids seen above it
 * (a set: the order it was written in, or another writer's spelling of it, does not matter).
 */
export function samePosition(a: FeedPosition | undefined, b: FeedPosition): boolean {
  if (a === undefined || a.cursor !== b.cursor) return false;
  const seen = new Set(a.seenAbove);
  return seen.size === new Set(b.seenAbove).size && b.seenAbove.every((id) => seen.has(id));
}

/** Whether everything behind `b` is behind `a` too. */
export function covers(a: FeedPosition, b: FeedPosition): boolean {
  return a.cursor >= b.cursor && b.seenAbove.every((id) => isBehind(a, id));
}

/** Thrown by a catch-up commit whose sink was moved meanwhile (a replay): nothing was written. */
export class CatchUpRefused extends FeedsyncError {
  constructor(source: string, sink: string, expected: number, found: number | undefined, why?: string) {
    super(
      `catch-up of sink ${sink} from source ${source} not committed: ` +
        (why ??
          (found === undefined
            ? 'the sink is back on the shared stream'
            : `its position was replaced (generation ${found}, this page was read for ${expected})`)),
      true,
    );
  }
}

/** One log line and one event when a page commit parks a sink. */
export function reportParked(
  events: PipelineEvents | undefined,
  logger: Logger | undefined,
  source: string,
  sink: string,
): void {
  events?.emit('sink:parked', { source, sink });
  logger?.warn(
    { sink, source },
    `sink ${sink} reached its max_backlog: parked (source ${source} goes on without it; ` +
      'it catches up from the feed once it has delivered what it has queued)',
  );
}

/** One log line per source and removed sink whose position (or record) was dropped at start-up. */
export function reportForgotten(
  logger: Logger | undefined,
  source: string,
  f: {
    sink: string;
    position?: { cursor: number; reason: LagReason; pendingIds: number };
    lostUpstream: number;
  },
): void {
  const dropped = [
    f.position
      ? `its own position at event ${f.position.cursor} (${f.position.reason}` +
        (f.position.pendingIds ? `, ${f.position.pendingIds} ids waiting to be seen again)` : ')')
      : 'its record (it was on the shared stream)',
    ...(f.lostUpstream ? [`its count of ${f.lostUpstream} events lost upstream`] : []),
  ].join(' and ');
  logger?.info(
    { sink: f.sink, source, dropped: f },
    `sink ${f.sink} is no longer configured: dropped ${dropped} on source ${source}`,
  );
}

/** A replay that cannot be done as asked (the reason says why and what to do). */
export class ReplayRefused extends FeedsyncError {
  constructor(message: string) {
    super(message, false);
  }
}

/** The one rule of replay, for both drivers: where the sink is now decides whether `from` is allowed. */
export function replayRefusal(
  req: { source: string; sink: string; from: FeedPosition },
  lag: { reason: LagReason; cursor: number } | undefined,
  sourceCursor: number | undefined,
): string | undefined {
  const at = `sink ${req.sink} on source ${req.source}`;
  if (lag?.reason === 'replay')
    return `${at}: a replay is still running (at event ${lag.cursor}); wait until it has caught up (feedsync status)`;
  if (lag && req.from.cursor > lag.cursor)
    return `${at} lags behind at event ${lag.cursor} (${lag.reason}): a replay from ${req.from.cursor} would skip events; replay from ${lag.cursor} or earlier`;
  if (!lag && (sourceCursor === undefined || req.from.cursor >= sourceCursor))
    return `${at}: nothing to replay after event ${req.from.cursor} (the source's cursor is ${sourceCursor ?? 'not set yet'})`;
  return undefined;
}

/** live: on its source's shared stream; failing: live but its deliveries fail; parked / catching_up: off it. */
export const SINK_STATES = ['live', 'failing', 'parked', 'catching_up'] as const;
export type SinkState = (typeof SINK_STATES)[number];

/** One (source, sink) as `status`, the metrics and the dashboard show it. */
export interface SinkPositionView {
  source: string;
  sink: string;
  state: SinkState;
  /** The event id it has reached in the source's feed (live: the source's cursor). */
  position: number | null;
  /** About how many events it is behind: ids between its position and the cursor, plus its queued changes. */
  lagEvents: number | null;
  /** How old the newest event behind its position is (off the shared stream), else null. */
  lagSeconds: number | null;
  /** Its undelivered queued changes (all sources). */
  queued: number;
  reason: LagReason | null;
  since: number | null;
  pendingIds: number;
  idsTruncated: boolean;
  lostUpstream: number;
}

export interface PositionInputs {
  sources: { name: string; service: string; cursor: number | null }[];
  sinks: ProducerSink[];
  /** Per sink: queued (waiting + active + delayed) and retrying after a failure. */
  counts: Record<string, { queued: number; retrying: number }>;
  lagging: LaggingSink[];
  lost: LostUpstream[];
  now: number;
}

/** Every (source, sink) the sink's filter lets through, with its state and lag. */
export function describePositions(input: PositionInputs): SinkPositionView[] {
  const out: SinkPositionView[] = [];
  for (const source of input.sources) {
    for (const sink of input.sinks) {
      if (!wantsSource(sink.filter, source.name, source.service)) continue;
      const lag = input.lagging.find((l) => l.source === source.name && l.sink === sink.name);
      const counts = input.counts[sink.name] ?? { queued: 0, retrying: 0 };
      const lost = input.lost.find((l) => l.source === source.name && l.sink === sink.name)?.count ?? 0;
      if (!lag) {
        out.push({
          source: source.name,
          sink: sink.name,
          state: counts.retrying > 0 ? 'failing' : 'live',
          position: source.cursor,
          lagEvents: counts.queued,
          lagSeconds: null,
          queued: counts.queued,
          reason: null,
          since: null,
          pendingIds: 0,
          idsTruncated: false,
          lostUpstream: lost,
        });
        continue;
      }
      const behind = source.cursor === null ? 0 : Math.max(0, source.cursor - lag.cursor);
      const from = lag.eventAt > 0 ? lag.eventAt : lag.since;
      out.push({
        source: source.name,
        sink: sink.name,
        state: lag.backlog >= catchUpWindow(lag.bound) ? 'parked' : 'catching_up',
        position: lag.cursor,
        lagEvents: behind + lag.backlog,
        lagSeconds: Math.max(0, (input.now - from) / 1000),
        queued: lag.backlog,
        reason: lag.reason,
        since: lag.since,
        pendingIds: lag.pendingIds,
        idsTruncated: lag.idsTruncated,
        lostUpstream: lost,
      });
    }
  }
  return out;
}
