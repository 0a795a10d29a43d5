// A sink's dead-letter list is its queue `<sink>.dead` (names.ts): one job per dead change, job id
// = the change key, added to a queue that no worker consumes, so every job stays in `wait` until
// `dlq retry` or `dlq drop` removes it. Per change, unlike the shard queues, so that one bad change
// never takes the rest of its slice with it.
import { Queue, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { errorMessage } from '../../core/errors.js';
import type { Change } from '../../core/change.js';
import { progressOf } from './attempts.js';
import { backlogKey, deadQueueName, jobIdForKey } from './names.js';
import { luaScript, runScript } from './scripts.js';
import { changesOf, UNCOUNTED_SLICE } from './slice.js';

export interface DeadChange {
  change: Change;
  error: string;
  attempts: number;
  /** epoch ms */
  failedAt: number;
}

export function openDeadQueue(
  sink: string,
  connection: Redis,
  prefix: string,
  logger: Logger,
): Queue<DeadChange> {
  const queue = new Queue<DeadChange>(deadQueueName(sink), { connection, prefix });
  // Failures reach callers as rejections; this only keeps BullMQ from printing each one.
  queue.on('error', (err: Error) => logger.debug({ sink, err: errorMessage(err) }, 'dead queue error'));
  return queue;
}

// KEYS: a failed slice's job hash, its shard's backlog hash. ARGV: the sink, the slice's length,
// UNCOUNTED_SLICE (such a slice was never counted in: slice.ts).
// What leaves the backlog is what the job's stored progress has not counted out yet (shard-lease.ts
// counts out as it records), and the job keeps a mark, so its changes leave the backlog once.
const COUNT_OUT = luaScript(
  'count_out_buried',
  `
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'feedsyncBuried') == 1 then return 0 end
redis.call('HSET', KEYS[1], 'feedsyncBuried', '1')
if redis.call('HGET', KEYS[1], 'name') == ARGV[3] then return 1 end
local done = 0
local ok, progress = pcall(cjson.decode, redis.call('HGET', KEYS[1], 'progress') or '0')
if ok and type(progress) == 'table' and tonumber(progress.done) then done = tonumber(progress.done) end
local left = tonumber(ARGV[2]) - done
if left > 0 then redis.call('HINCRBY', KEYS[2], ARGV[1], -left) end
return 1`,
);

/** Durable once resolved. A change already dead in this sink is left as it is (same job id). */
export async function buryChanges(dead: Queue<DeadChange>, entries: DeadChange[]): Promise<void> {
  if (entries.length === 0) return;
  await dead.addBulk(
    entries.map((entry) => ({
      name: entry.change.event_type,
      data: entry,
      opts: { jobId: jobIdForKey(entry.change.key), removeOnComplete: true, removeOnFail: false },
    })),
  );
}

/** The changes of a failed slice job that were neither delivered nor dead-lettered yet. */
export function undeliveredOf(job: Job): Change[] {
  return changesOf(job.data, job.id).slice(progressOf(job).done);
}

/**
 * A slice job lands in its shard queue's failed set only when BullMQ fails it itself: stalled more
 * than `queue.attempts` times (a process killed mid-slice again and again) or an unexpected error.
 * Its undelivered changes become dead letters of the sink, then the job goes. Idempotent (the dead
 * jobs' ids are the keys), so the worker that saw the failure and `dlq` may both do it.
 */
export async function buryFailedSlice(
  failed: Job,
  dead: Queue<DeadChange>,
  /** The job's shard queue: its tag holds the backlog the job counted in. */
  shard: Queue,
): Promise<Change[]> {
  // Read again: a worker's Job holds the progress it was fetched with, while what it delivered
  // since is recorded in Redis only (shard-lease.ts). BullMQ also fails a slice whose every change
  // was delivered when its completion meets a Redis error (a cluster redirection mid-failover);
  // such a slice buries nothing. One that BullMQ will run again is not buried either.
  const job = await shard.getJob(failed.id!);
  if (!job || (await job.getState()) !== 'failed') return [];
  const changes = undeliveredOf(job);
  const attempts = Math.max(progressOf(job).attempts, job.stalledCounter ?? 0, job.attemptsMade ?? 0, 1);
  const failedAt = job.finishedOn ?? Date.now();
  const error = job.failedReason || 'slice job failed';
  await buryChanges(
    dead,
    changes.map((change) => ({ change, error, attempts, failedAt })),
  );
  // They leave the sink's backlog (page-commit.ts) for its dead letters, once however often the
  // bury is done again (a crash before the job's removal).
  const sink = dead.name.slice(0, -'.dead'.length);
  const client = (await shard.backend.client) as unknown as Redis;
  await runScript(
    client,
    COUNT_OUT,
    [shard.toKey(job.id!), backlogKey(shard.opts.prefix ?? '')],
    [sink, String(changesOf(job.data, job.id).length), UNCOUNTED_SLICE],
  );
  await job.remove();
  return changes;
}

/** Every failed slice of one shard queue, buried; resolves with the number of changes buried. */
/** Failed slices read per page by buryFailedSlices. */
const FAILED_PAGE = 500;

export async function buryFailedSlices(
  shard: Queue,
  dead: Queue<DeadChange>,
  logger: Logger,
): Promise<number> {
  let buried = 0;
  // A page at a time (memory stays bounded); buried jobs leave the set, the ones that cannot be
  // buried stay, so the next page starts after them.
  for (let skipped = 0; ;) {
    const page = await shard.getJobs(['failed'], skipped, skipped + FAILED_PAGE - 1, true);
    for (const job of page) {
      if (!job) continue;
      try {
        changesOf(job.data, job.id);
      } catch (err) {
        // Not a slice: it cannot become dead letters, so it stays visible in Redis for a human
        // rather than being dropped.
        logger.error({ queue: shard.name, job: job.id, err: errorMessage(err) }, 'cannot bury failed job');
        skipped++;
        continue;
      }
      buried += (await buryFailedSlice(job, dead, shard)).length;
    }
    if (page.length < FAILED_PAGE) return buried;
  }
}
