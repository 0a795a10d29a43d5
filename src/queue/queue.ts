import type { Change } from '../core/change.js';
import { FeedsyncError } from '../core/errors.js';

/** What a poller hands over once per page: every change of the page and the cursor after it. */
export interface PageCommit {
  source: string;
  changes: Change[];
  /** The new cursor (the newer_than for the next request). */
  cursor: number;
  /** Event ids above `cursor` that this page already queued (workflow overlap, see services/workflow.ts). */
  seenAbove: number[];
  /**
   * The position the page was read after (the cursor before it): where a sink parked by this page
   * resumes. Default: the stored cursor.
   */
  from?: FeedPosition;
}

/**
 * The store holds another cursor than the page was read after: it lost its last writes (a Redis
 * host crash before fsync, a failover to a replica that lagged) or was moved. Nothing was
 * written; the poller reads its position from the store again and goes on from there, so the
 * pages the store forgot are read and queued again.
 */
export class PositionLost extends FeedsyncError {
  /** `stored` undefined: the store holds no position for the source, though it did before. */
  constructor(source: string, expected: FeedPosition, stored: FeedPosition | undefined) {
    super(
      `source ${source}: the stored cursor is ${stored ? stored.cursor : 'gone'}, not ${expected.cursor} as this ` +
        'poller last committed (the store lost writes, or the cursor was moved); reading from the stored ' +
        'cursor',
      true,
    );
  }
}

/** A position in a source's feed: every event at or below `cursor`, and those in `seenAbove`, is behind it. */
export interface FeedPosition {
  cursor: number;
  seenAbove: number[];
}

/**
 * A sink off the shared stream of one source (sink-positions.ts explains the model): parked (its
 * backlog reached its bound; the shared poll queues nothing more for it) or catching up from its
 * own position after it drained (or after a backfill or a replay put it there).
 */
export interface LaggingSink extends FeedPosition {
  source: string;
  sink: string;
  reason: 'parked' | 'backfill' | 'replay';
  /** epoch ms: when it left the shared stream (or the replay was asked for). */
  since: number;
  /** epoch ms of the newest event its position has passed (0: unknown), for lag in seconds. */
  eventAt: number;
  /** Bumped by every replay: a catch-up commit made for another generation is refused. */
  generation: number;
  /** Ids the shared poll passed for it while it was parked, not yet seen again by its catch-up. */
  pendingIds: number;
  /** More ids were passed than are kept (queue.max_parked_ids): the lost-upstream check is partial. */
  idsTruncated: boolean;
  /** Its undelivered queued changes now, and its bound (max_backlog). */
  backlog: number;
  bound: number;
}

/** One catch-up page for one sink: its changes (the driver applies the sink's filter) and its new position. */
export interface CatchUpCommit extends FeedPosition {
  source: string;
  sink: string;
  generation: number;
  /** Kept as they were (from the LaggingSink the page was read for). */
  reason: LaggingSink['reason'];
  since: number;
  changes: Change[];
  /** Ids of every event of the page the sink had not passed (they leave its pending ids). */
  eventIds: number[];
  eventAt: number;
  /** The position reached covers the shared stream's: the sink rejoins it in this same commit. */
  join: boolean;
  /**
   * The sink's position the page was read after: the commit is refused unless it is still there
   * (checked by the bullmq driver; the local store commits in the poller's own process, under one
   * writer, so nothing can move it in between).
   */
  from: FeedPosition;
  /**
   * The source's shared position the page's events were told apart by (queued here if the shared
   * stream had passed them): refused unless the source's stored cursor is still there.
   */
  shared: FeedPosition;
}

export interface CatchUpResult {
  /** Changes queued for the sink. */
  queued: number;
  /** On join: the pending ids never seen again (no longer in the feed: lost upstream). */
  lost: number[];
}

/** Where a replay puts a sink: refused while another replay of it is still catching up. */
export interface ReplayRequest {
  source: string;
  sink: string;
  from: FeedPosition;
}

/** Events passed while a sink was parked that its catch-up never saw again (no longer in the feed). */
export interface LostUpstream {
  source: string;
  sink: string;
  count: number;
  /** The first ids of the last time it happened (at most LOST_IDS_KEPT). */
  ids: number[];
  /** epoch ms of the last time. */
  at: number;
}

/** Per-sink positions for `status`, metrics and `replay`, from any process. */
export interface SinkPositionsAdmin {
  /** Every (source, sink) that lost events upstream, ever. */
  lost(): Promise<LostUpstream[]>;
  /** Every sink off a source's shared stream (the others follow their source's cursor). */
  lagging(): Promise<LaggingSink[]>;
  /**
   * Puts the sink at `from` in the source's feed: the source's poller re-delivers it from there on
   * its own reader, the other sinks untouched. Returns where the sink was. Throws ReplayRefused.
   */
  replay(req: ReplayRequest): Promise<{ before: number | null }>;
}

export interface SinkJobCounts {
  waiting: number;
  active: number;
  delayed: number;
  /** Deliveries that failed and are waiting for their next attempt (local: same as delayed with attempts > 0). */
  failed: number;
  dead: number;
}

export interface DeadLetter {
  sink: string;
  key: string;
  change: Change;
  attempts: number;
  error: string;
  /** epoch ms */
  failedAt: number;
}

export interface DeadLetterFilter {
  sink?: string;
  key?: string;
}

/**
 * The producer side. The cursor invariant (docs/guarantees.md): after commitPage() resolves, every change of
 * the page is durably queued for every sink whose filter it passes AND the cursor is saved; if it
 * throws, the cursor did not move past anything that was not queued.
 */
export interface ChangeQueue {
  /** Resolves with the number of changes queued per sink name (sinks whose filter they passed). */
  commitPage(commit: PageCommit): Promise<Record<string, number>>;
  /** The sinks of `source` off its shared stream, with their backlogs. */
  laggingSinks(source: string): Promise<LaggingSink[]>;
  /** Fenced like commitPage; refused (CatchUpRefused) when the sink's generation moved on. */
  commitCatchUp(commit: CatchUpCommit): Promise<CatchUpResult>;
  /**
   * Called by a source's poller when it starts (fenced like commitPage): sinks never seen for the
   * source before, with a `start_from`, get a backfill position when the source already has a cursor.
   */
  registerSinks(source: string, service: string, at: FeedPosition | undefined): Promise<string[]>;
}

/** Operations shared by both drivers for `status` and `dlq`. */
export interface QueueAdmin {
  counts(): Promise<Record<string, SinkJobCounts>>;
  listDead(filter: DeadLetterFilter, limit?: number): Promise<DeadLetter[]>;
  /** Re-queue matching dead letters; returns how many. */
  retryDead(filter: DeadLetterFilter): Promise<number>;
  /** Delete matching dead letters; returns how many. */
  dropDead(filter: DeadLetterFilter): Promise<number>;
}

/** A sink as the delivery side sees it: its name, its filter (already applied by producers), the sink. */
export interface SinkRuntime {
  name: string;
  sink: import('../sinks/sink.js').Sink;
  /** 'failing' while the sink keeps failing and only probes reach it (sinks/probe-gate.ts). */
  state?: () => 'healthy' | 'failing';
  /** ms until the sink takes a call again (0: now); a driver may wait that long instead of being turned away. */
  readyInMs?: () => number;
}

/** The consumer side: runs deliveries to sinks until stopped. */
export interface DeliveryRunner {
  start(): Promise<void>;
  /** Stop taking work, let in-flight deliveries finish (or hand them back) within timeoutMs. */
  stop(timeoutMs: number): Promise<void>;
}
