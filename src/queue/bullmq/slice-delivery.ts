// Delivering one slice job to its sink, change by change or in batches, keeping the job at the head
// of its shard while a change waits for a retry. delivery.ts explains the mechanism and runs this.
import { RateLimitError, type Job, type Queue } from 'bullmq';
import type { Logger } from 'pino';
import { sleep } from '../../backoff.js';
import type { QueueConfig } from '../../config/types.js';
import { errorMessage } from '../../core/errors.js';
import type { Change } from '../../core/change.js';
import type { PipelineEvents } from '../../core/events.js';
import { decideAfterFailure, retryDelayMs } from '../delivery-policy.js';
import { reportDelivered, reportFailed } from '../delivery-report.js';
import type { SinkRuntime } from '../queue.js';
import { progressOf, type SliceProgress } from './attempts.js';
import { buryChanges, type DeadChange } from './dead-letters.js';
import { HandedBack, raceHandBack, settledWithin } from './hand-back.js';
import { batchRunLength, changesOf, type ChangeSlice } from './slice.js';

export interface SliceDeliveryContext {
  runtime: SinkRuntime;
  shardQueue: Queue<ChangeSlice>;
  deadQueue: Queue<DeadChange>;
  config: QueueConfig;
  events: PipelineEvents;
  logger: Logger;
  /** Aborted when stop() begins: no further change of a slice is started. */
  stopping: AbortSignal;
  /** Aborted shortly before the stop deadline: the sink call in flight is abandoned. */
  handBack: AbortSignal;
}

/** Changes per deliverBatch call at most (slices are pages, so this rarely binds). */
const MAX_BATCH = 200;
/** A hand-back records how far the slice got, but never holds up a stop for long. */
const HAND_OVER_MS = 1_000;

/** Where this run of the job stands; `persisted` is the `done` that Redis knows about. */
interface Position extends SliceProgress {
  persisted: number;
}

/**
 * Resolves when every change of the slice was delivered or dead-lettered; throws RateLimitError to
 * put the job back at the head of its shard (a retry is due later, or the process is stopping).
 */
export async function deliverSlice(ctx: SliceDeliveryContext, job: Job<ChangeSlice>): Promise<void> {
  const changes = changesOf(job.data, job.id);
  const progress = progressOf(job);
  const at: Position = { ...progress, persisted: progress.done };
  // After a failed batch this run goes one by one, so the failing change is found and retried alone.
  let batching = Boolean(ctx.runtime.sink.deliverBatch);
  while (at.done < changes.length) {
    if (ctx.stopping.aborted || ctx.handBack.aborted) await handOver(ctx, job, at);
    if (batching && at.attempts === 0) {
      const length = batchRunLength(changes, at.done, MAX_BATCH);
      if (length > 1) {
        if (await deliverBatch(ctx, job, at, changes.slice(at.done, at.done + length))) at.done += length;
        else batching = false;
        continue;
      }
    }
    await deliverOne(ctx, job, at, changes[at.done]!);
  }
}

/** true when the sink took the whole batch; false when it failed (no attempt is counted for it). */
async function deliverBatch(
  ctx: SliceDeliveryContext,
  job: Job<ChangeSlice>,
  at: Position,
  batch: Change[],
): Promise<boolean> {
  const started = performance.now();
  try {
    await raceHandBack(ctx.runtime.sink.deliverBatch!(batch), ctx.handBack);
  } catch (err) {
    if (err instanceof HandedBack) await handOver(ctx, job, at);
    ctx.logger.info(
      { first: batch[0]!.key, changes: batch.length, err: errorMessage(err) },
      'batch delivery failed; delivering its changes one by one',
    );
    return false;
  }
  const durationSeconds = (performance.now() - started) / 1000;
  reportDelivered(ctx.events, ctx.runtime.name, batch, durationSeconds);
  return true;
}

async function deliverOne(
  ctx: SliceDeliveryContext,
  job: Job<ChangeSlice>,
  at: Position,
  change: Change,
): Promise<void> {
  const { runtime, config } = ctx;
  const key = change.key;
  const started = performance.now();
  const seconds = (): number => (performance.now() - started) / 1000;
  try {
    await raceHandBack(runtime.sink.deliver(change), ctx.handBack);
  } catch (err) {
    if (err instanceof HandedBack) await handOver(ctx, job, at);
    const decision = decideAfterFailure(err, at.attempts, config);
    const report = { ...ctx, sink: runtime.name };
    if (decision.outcome === 'dead') {
      await deadLetter(ctx, job, at, {
        change,
        error: `sink ${runtime.name}: ${decision.reason}: ${errorMessage(err)}`,
        attempts: decision.attempts,
        failedAt: Date.now(),
      });
      reportFailed(report, key, decision, err, seconds());
      return;
    }
    reportFailed(report, key, decision, err, seconds());
    await waitAtHead(ctx, job, { done: at.done, attempts: decision.attempts }, decision.delayMs);
  }
  reportDelivered(ctx.events, runtime.name, [change], seconds());
  at.done++;
  at.attempts = 0;
}

/**
 * The change goes to the sink's dead queue and the slice carries on with the next one. If the
 * process dies between the two writes, the change is tried again and re-buried as a no-op.
 */
async function deadLetter(
  ctx: SliceDeliveryContext,
  job: Job<ChangeSlice>,
  at: Position,
  entry: DeadChange,
): Promise<void> {
  try {
    await buryChanges(ctx.deadQueue, [entry]);
  } catch (err) {
    // Not buried, so not skipped either: the change stays where it is and is tried again later.
    ctx.logger.warn(
      { key: entry.change.key, err: errorMessage(err) },
      'cannot dead-letter in redis; will retry',
    );
    await waitAtHead(ctx, job, { done: at.done, attempts: at.attempts }, retryDelayMs(1, ctx.config));
  }
  at.done++;
  at.attempts = 0;
  try {
    await job.updateProgress({ done: at.done, attempts: 0 });
    at.persisted = at.done;
  } catch (err) {
    // The dead letter is durable; a crash before the next save only means trying it once more.
    ctx.logger.warn(
      { key: entry.change.key, err: errorMessage(err) },
      'cannot record slice progress in redis',
    );
  }
}

/**
 * Keep the job at the head of its shard for `delayMs`: record where the slice stands, rate-limit
 * the shard, throw RateLimitError (see delivery.ts).
 */
async function waitAtHead(
  ctx: SliceDeliveryContext,
  job: Job<ChangeSlice>,
  progress: SliceProgress,
  delayMs: number,
): Promise<never> {
  try {
    await job.updateProgress(progress);
    await ctx.shardQueue.rateLimit(delayMs);
  } catch (bookkeeping) {
    // Without the limiter key the shard would retry at once; wait here instead (the worker keeps
    // renewing the job lock meanwhile). The attempt may go uncounted: Redis is failing anyway.
    ctx.logger.warn(
      { job: job.id, err: errorMessage(bookkeeping) },
      'cannot record retry in redis; waiting in-process',
    );
    await sleep(delayMs, ctx.handBack);
  }
  throw new RateLimitError();
}

/** Stopping: record how far the slice got (fewer duplicates next time), give the job back. */
async function handOver(ctx: SliceDeliveryContext, job: Job<ChangeSlice>, at: Position): Promise<never> {
  if (at.done > at.persisted) {
    const saved = job.updateProgress({ done: at.done, attempts: at.attempts });
    saved.catch(() => undefined);
    await settledWithin(saved, HAND_OVER_MS);
  }
  throw new RateLimitError();
}
