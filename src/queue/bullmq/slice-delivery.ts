// Delivering one slice job to its sink, change by change or in batches, keeping the job at the head
// of its shard while a change waits for a retry. delivery.ts explains the mechanism and runs this.
import { RateLimitError, type Job, type Queue } from 'bullmq';
import type { Logger } from 'pino';
import { sleep } from '../../backoff.js';
import type { QueueConfig } from '../../config/types.js';
import { errorMessage, RetryLaterError } from '../../core/errors.js';
import type { Change } from '../../core/change.js';
import type { PipelineEvents } from '../../core/events.js';
import { decideAfterFailure, retryDelayMs } from '../delivery-policy.js';
import { reportDelivered, reportFailed } from '../delivery-report.js';
import type { SinkRuntime } from '../queue.js';
import { progressOf, type SliceProgress } from './attempts.js';
import { buryChanges, type DeadChange } from './dead-letters.js';
import { HandedBack, raceHandBack, settledWithin } from './hand-back.js';
import type { ShardLease } from './shard-lease.js';
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
  lease: ShardLease;
  lockToken: string;
  jobKey: string;
  /** The last progress write sent (they go out in order on one connection). */
  saving: Promise<unknown>;
  /** A progress write found the lease taken: another worker owns the shard now. */
  taken: boolean;
}

/**
 * Resolves when every change of the slice was delivered or dead-lettered; throws RateLimitError to
 * put the job back at the head of its shard (a retry is due later, or the process is stopping).
 */
export async function deliverSlice(
  ctx: SliceDeliveryContext,
  job: Job<ChangeSlice>,
  lockToken: string,
  lease: ShardLease,
): Promise<void> {
  const changes = changesOf(job.data, job.id);
  const jobKey = ctx.shardQueue.toKey(job.id!);
  // As Redis held it when BullMQ moved the job to active for this worker.
  const progress = progressOf(job);
  const at: Position = {
    ...progress,
    persisted: progress.done,
    lease,
    lockToken,
    jobKey,
    saving: Promise.resolve(),
    taken: false,
  };
  // After a failed batch this run goes one by one, so the failing change is found and retried alone.
  let batching = Boolean(ctx.runtime.sink.deliverBatch);
  while (at.done < changes.length) {
    if (ctx.stopping.aborted || ctx.handBack.aborted) await handOver(ctx, job, at);
    // Paused past the lease, or the shard taken: start nothing more (see shard-lease.ts).
    if (at.taken || !lease.valid()) await handOver(ctx, job, at);
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
  await recordDone(ctx, job, at, changes.length);
}

/**
 * The job completes only once Redis has its progress at the end: the progress write is what
 * counts the slice's changes out of the sink's backlog, and once BullMQ completes the job (its lock
 * gone) a write still on its way (slowed by a loaded machine, or sent again by ioredis after
 * NOSCRIPT) would be refused and leave the backlog counting delivered changes. Not recorded (the
 * shard taken, Redis failing, or a stop ran out of time): the job goes back to its shard, and its
 * next run finds where it stands.
 */
async function recordDone(
  ctx: SliceDeliveryContext,
  job: Job<ChangeSlice>,
  at: Position,
  length: number,
): Promise<void> {
  try {
    await raceHandBack(at.saving, ctx.handBack);
    if (at.persisted >= length) return;
    if (
      !at.taken &&
      (await raceHandBack(
        at.lease.saveProgress(at.jobKey, at.lockToken, { done: length, attempts: 0 }),
        ctx.handBack,
      ))
    )
      return;
    at.taken = true;
  } catch (err) {
    if (!(err instanceof HandedBack))
      ctx.logger.warn(
        { job: job.id, err: errorMessage(err) },
        'cannot record slice progress in redis; handing the slice back',
      );
  }
  await handOver(ctx, job, at);
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
    await raceHandBack(ctx.runtime.sink.deliverBatch!(batch, { fence: at.lease.fence() }), ctx.handBack);
  } catch (err) {
    if (err instanceof HandedBack) await handOver(ctx, job, at);
    // The sink asked to wait (Retry-After): the whole batch waits as asked, at the head of its
    // shard, instead of being retried change by change at once.
    if (err instanceof RetryLaterError && err.retryAfterMs !== undefined) {
      const decision = decideAfterFailure(err, at.attempts, ctx.config);
      if (decision.outcome === 'retry') {
        const report = { ...ctx, sink: ctx.runtime.name };
        for (const change of batch)
          reportFailed(report, change.key, decision, err, (performance.now() - started) / 1000);
        await waitAtHead(ctx, at, { done: at.done, attempts: at.attempts }, decision.delayMs);
      }
    }
    ctx.logger.info(
      { first: batch[0]!.key, changes: batch.length, err: errorMessage(err) },
      'batch delivery failed; delivering its changes one by one',
    );
    return false;
  }
  const durationSeconds = (performance.now() - started) / 1000;
  reportDelivered(ctx.events, ctx.runtime.name, batch, durationSeconds);
  persist(ctx, at, at.done + batch.length, batch.length);
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
    await raceHandBack(runtime.sink.deliver(change, { fence: at.lease.fence() }), ctx.handBack);
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
    await waitAtHead(ctx, at, { done: at.done, attempts: decision.attempts }, decision.delayMs);
  }
  reportDelivered(ctx.events, runtime.name, [change], seconds());
  persist(ctx, at, at.done + 1, 1);
  at.done++;
  at.attempts = 0;
}

/**
 * Records that the slice got to `done` (fenced by the shard lease, sent without waiting: writes
 * go out in order on one connection). A write refused because another worker took the shard means
 * the `delivered` changes just delivered were in flight when this worker lost it: they are counted,
 * and the new owner delivers them again.
 */
function persist(ctx: SliceDeliveryContext, at: Position, done: number, delivered: number): void {
  at.saving = at.lease.saveProgress(at.jobKey, at.lockToken, { done, attempts: 0 }).then(
    (written) => {
      if (written) {
        at.persisted = Math.max(at.persisted, done);
        return;
      }
      at.taken = true;
      ctx.events.emit('delivery:after-lease-loss', { sink: ctx.runtime.name, changes: delivered });
      ctx.logger.warn(
        { changes: delivered },
        'a delivery finished after another worker took the shard over; it will deliver these changes again',
      );
    },
    (err: unknown) =>
      ctx.logger.warn({ err: errorMessage(err) }, 'cannot record slice progress in redis; will retry'),
  );
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
    await waitAtHead(ctx, at, { done: at.done, attempts: at.attempts }, retryDelayMs(1, ctx.config));
  }
  at.done++;
  at.attempts = 0;
  try {
    if (await at.lease.saveProgress(at.jobKey, at.lockToken, { done: at.done, attempts: 0 }))
      at.persisted = at.done;
    else at.taken = true;
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
  at: Position,
  progress: SliceProgress,
  delayMs: number,
): Promise<never> {
  try {
    await at.saving;
    // Another worker owns the shard: leave the retry to it.
    if (!(await at.lease.saveProgress(at.jobKey, at.lockToken, progress))) throw new RateLimitError();
    await ctx.shardQueue.rateLimit(delayMs);
  } catch (bookkeeping) {
    if (bookkeeping instanceof RateLimitError) throw bookkeeping;
    // Without the limiter key the shard would retry at once; wait here instead (the worker keeps
    // renewing the job lock meanwhile). The attempt may go uncounted: Redis is failing anyway.
    ctx.logger.warn(
      { job: at.jobKey, err: errorMessage(bookkeeping) },
      'cannot record retry in redis; waiting in-process',
    );
    await sleep(delayMs, ctx.handBack);
  }
  throw new RateLimitError();
}

/**
 * Stopping, or the shard lost: let the progress writes in flight land (never holding a stop up for
 * long), record how far the slice got if it is still ours, and give the job back.
 */
async function handOver(ctx: SliceDeliveryContext, job: Job<ChangeSlice>, at: Position): Promise<never> {
  await settledWithin(at.saving, HAND_OVER_MS);
  if (at.done > at.persisted && !at.taken) {
    const saved = at.lease.saveProgress(at.jobKey, at.lockToken, { done: at.done, attempts: at.attempts });
    saved.catch(() => undefined);
    await settledWithin(saved, HAND_OVER_MS);
  }
  if (at.taken || !at.lease.valid())
    ctx.logger.warn({ job: job.id }, "the shard lease is no longer this worker's; slice handed back");
  throw new RateLimitError();
}
