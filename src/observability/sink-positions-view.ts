// Per (source, sink) positions as `feedsync status`, /metrics and the dashboard show them: one read
// of the sources' cursors, the queue counts and the per-sink positions, turned into one view per
// pair by describePositions (queue/sink-positions.ts has the model, docs/sink-positions.md the
// user's side of it). Both drivers, any process: the daemon in every mode, and the ops commands.
import type { FeedsyncConfig } from '../config/types.js';
import type { SourceState, SourceStatus } from '../queue/driver.js';
import type { LostUpstream, QueueAdmin, SinkJobCounts, SinkPositionsAdmin } from '../queue/queue.js';
import { describePositions, producerSinks, type SinkPositionView } from '../queue/sink-positions.js';
import { wantsSource } from '../sinks/filter.js';

export interface PositionReaders {
  sourceState: Pick<SourceState, 'status'>;
  admin: Pick<QueueAdmin, 'counts'>;
  positions: Pick<SinkPositionsAdmin, 'lagging' | 'lost'>;
}

export interface SinkPositions {
  /** One per configured (source, sink) pair the sink's filter lets through, in config order. */
  views: SinkPositionView[];
  /** Every (source, sink) that ever lost events upstream, with the first ids of the last loss. */
  lost: LostUpstream[];
}

/** A sink's undelivered changes (waiting, in flight, delayed) and those waiting for a retry. */
export function positionCounts(
  counts: Record<string, SinkJobCounts>,
): Record<string, { queued: number; retrying: number }> {
  return Object.fromEntries(
    Object.entries(counts).map(([sink, c]) => [
      sink,
      { queued: c.waiting + c.active + c.delayed, retrying: c.failed },
    ]),
  );
}

/**
 * Reads everything a position view needs. `statuses` and `counts` may be passed when the caller has
 * just read them: `status` shows one reading of each, the metrics share the counts of
 * feedsync_queue_jobs.
 */
export async function readSinkPositions(
  config: FeedsyncConfig,
  readers: PositionReaders,
  opts: { statuses?: SourceStatus[]; counts?: Record<string, SinkJobCounts>; now?: number } = {},
): Promise<SinkPositions> {
  const [statuses, counts, lagging, lost] = await Promise.all([
    opts.statuses ?? readers.sourceState.status(config.sources.map((s) => s.name)),
    opts.counts ?? readers.admin.counts(),
    readers.positions.lagging(),
    readers.positions.lost(),
  ]);
  const cursors = new Map(statuses.map((s) => [s.source, s.cursor]));
  const views = describePositions({
    sources: config.sources.map((s) => ({
      name: s.name,
      service: s.service,
      cursor: cursors.get(s.name) ?? null,
    })),
    sinks: producerSinks(config),
    counts: positionCounts(counts),
    lagging,
    lost,
    now: opts.now ?? Date.now(),
  });
  return { views, lost };
}

/** The configured (source, sink) pairs a position exists for: the sink's filter lets the source through. */
export function sinkPositionPairs(config: FeedsyncConfig): { source: string; sink: string }[] {
  return config.sources.flatMap((source) =>
    config.sinks
      .filter((sink) => wantsSource(sink.filter, source.name, source.service))
      .map((sink) => ({ source: source.name, sink: sink.name })),
  );
}
