// `status` and `dlq` for the BullMQ driver. A sink's queue numbers are summed over its shard
// queues; its dead letters are the jobs of its dead queue `<sink>.dead`, one per change.
import { Job, Queue } from 'bullmq';
import type { ChainableCommander, Redis } from 'ioredis';
import { pino, type Logger } from 'pino';
import type { QueueConfig } from '../../config/types.js';
import { withDeadline } from '../../backoff.js';
import { FeedsyncError, errorMessage } from '../../core/errors.js';
import type { DeadLetter, DeadLetterFilter, QueueAdmin, SinkJobCounts } from '../queue.js';
import { progressOf } from './attempts.js';
import { readBacklogs } from './backlog.js';
import { buryFailedSlices, openDeadQueue, undeliveredOf, type DeadChange } from './dead-letters.js';
import {
  assertSinkName,
  backlogKey,
  jobIdForKey,
  KeySpace,
  shardIndexes,
  shardOf,
  shardQueueName,
} from './names.js';
import { closeRedis, createRedisConnection, redactRedisUrl, redisEndpoint } from './redis.js';
import { COUNTED_SLICE, retrySliceJobId, sliceJobOptions, type ChangeSlice } from './slice.js';
import { luaScript, queueScript } from './scripts.js';

export interface BullmqAdminOptions {
  queue: QueueConfig;
  sinkNames: string[];
  logger?: Logger;
  /** Fail an operation that gets no answer from Redis within this long (default 10 s). */
  timeoutMs?: number;
  /** Where the keys are (default: one Redis, queue.prefix). */
  keys?: KeySpace;
}

export type BullmqAdmin = QueueAdmin & { close(): Promise<void> };

interface SinkQueues {
  sink: string;
  /** Every shard queue of the sink: under every queue tag, and the earlier cluster layout's. */
  shards: Queue<ChangeSlice>[];
  /** Its shard queues by tag (names.ts KeySpace.of), by shard. */
  byTag: Map<string, Queue<ChangeSlice>[]>;
  dead: Queue<DeadChange>;
}

const DEFAULT_LIST_LIMIT = 100;
/** Dead letters (and failed slices) read into memory at a time by `dlq retry/drop` and `counts`. */
const DEAD_PAGE = 500;
const DEFAULT_TIMEOUT_MS = 10_000;

// KEYS: the job hash, the backlog hash. ARGV: the sink. A retried dead letter counts once it is queued.
const COUNT_IF_QUEUED = luaScript(
  'count_if_queued',
  `if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HINCRBY', KEYS[2], ARGV[1], 1) end return 1`,
);

export function createBullmqAdmin(opts: BullmqAdminOptions): BullmqAdmin {
  for (const sink of opts.sinkNames) assertSinkName(sink);
  const logger = opts.logger ?? pino({ level: 'silent' });
  const connection = createRedisConnection(redisEndpoint(opts.queue), 'admin', logger);
  const keys = opts.keys ?? KeySpace.single(opts.queue.prefix);
  const queuesBySink = new Map<string, SinkQueues>();
  const openShard = (sink: string, shard: number, tag: string) => {
    const queue = new Queue<ChangeSlice>(shardQueueName(sink, shard), { connection, prefix: tag });
    // Failures reach callers as rejections; this only keeps BullMQ from printing each one.
    queue.on('error', (err: Error) => logger.debug({ sink, err: errorMessage(err) }, 'queue error'));
    return queue;
  };
  for (const sink of opts.sinkNames) {
    const byTag = new Map(
      keys.queueTags.map((tag) => [
        tag,
        shardIndexes(opts.queue.shards).map((shard) => openShard(sink, shard, tag)),
      ]),
    );
    const legacy = keys.legacyQueueTags(sink).map((tag, shard) => openShard(sink, shard, tag));
    queuesBySink.set(sink, {
      sink,
      shards: [...[...byTag.values()].flat(), ...legacy],
      byTag,
      dead: openDeadQueue(sink, connection, keys.shared, logger),
    });
  }
  let closed: Promise<void> | undefined;

  function selectSinks(filter: DeadLetterFilter): [string, SinkQueues][] {
    if (filter.sink === undefined) return [...queuesBySink];
    const queues = queuesBySink.get(filter.sink);
    if (!queues) {
      throw new FeedsyncError(
        `unknown sink "${filter.sink}" (configured: ${[...queuesBySink.keys()].join(', ') || 'none'})`,
        false,
      );
    }
    return [[filter.sink, queues]];
  }

  /** Dead letters of one sink matching the filter, oldest first; `limit` undefined = all. */
  async function deadJobs(
    dead: Queue<DeadChange>,
    filter: DeadLetterFilter,
    limit?: number,
  ): Promise<Job<DeadChange>[]> {
    if (filter.key !== undefined) {
      const job = await dead.getJob(jobIdForKey(filter.key));
      return job ? [job] : [];
    }
    const end = limit === undefined ? -1 : limit - 1;
    const jobs = await dead.getJobs(['wait'], 0, end, true);
    return jobs.filter((job): job is Job<DeadChange> => Boolean(job));
  }

  async function matching(
    filter: DeadLetterFilter,
    limit?: number,
  ): Promise<{ sink: string; job: Job<DeadChange>; queues: SinkQueues }[]> {
    const found: { sink: string; job: Job<DeadChange>; queues: SinkQueues }[] = [];
    for (const [sink, queues] of selectSinks(filter)) {
      // Slices BullMQ failed whose worker died before burying their changes: bury them now, so
      // every dead change is in one place.
      for (const shard of queues.shards) await buryFailedSlices(shard, queues.dead, logger);
      for (const job of await deadJobs(queues.dead, filter, limit)) found.push({ sink, job, queues });
    }
    found.sort((a, b) => a.job.data.failedAt - b.job.data.failedAt);
    return limit === undefined ? found : found.slice(0, limit);
  }

  /**
   * Counted in CHANGES, as with the local queue: the sink's backlog counter (page-commit.ts,
   * shard-lease.ts) split into the changes of the slices in flight (at most one per shard), the
   * change waiting for a retry at the head of a shard, and the rest waiting. BullMQ's delayed set
   * is not used (a retry keeps its slice at the head of its shard, see delivery.ts).
   */
  async function counts(): Promise<Record<string, SinkJobCounts>> {
    const result: Record<string, SinkJobCounts> = {};
    // Through a queue's client: like BullMQ's own calls, it waits for a first connection (and the
    // operation's deadline says so) rather than failing at once.
    const [anyQueue] = [...queuesBySink.values()].flatMap((q) => q.shards);
    const client = anyQueue ? ((await anyQueue.backend.client) as unknown as Redis) : connection;
    const backlog = await readBacklogs(client, keys, [...queuesBySink.keys()]);
    for (const [sink, queues] of queuesBySink) {
      let queued = Math.max(0, backlog.get(sink) ?? 0);
      const total: SinkJobCounts = { waiting: 0, active: 0, delayed: 0, failed: 0, dead: 0 };
      for (const queue of queues.shards) {
        const c = await queue.getJobCounts('active', 'failed');
        if ((c.active ?? 0) > 0)
          for (const job of await queue.getJobs(['active'], 0, -1, true))
            if (job) total.active += undeliveredCount(job);
        const [head] = await queue.getJobs(['wait'], 0, 0, true);
        if (head && progressOf(head).attempts > 0) total.failed += 1;
        // Failed slices not yet buried (their worker died first) are dead changes all the same;
        // read a page at a time, so memory stays bounded however many there are.
        for (let start = 0; start < (c.failed ?? 0); start += DEAD_PAGE) {
          for (const job of await queue.getJobs(['failed'], start, start + DEAD_PAGE - 1, true)) {
            if (!job) continue;
            const n = undeliveredCount(job);
            total.dead += n;
            queued -= n;
          }
        }
      }
      total.waiting = Math.max(0, queued - total.active - total.failed);
      total.dead += (await queues.dead.getJobCounts('wait')).wait ?? 0;
      result[sink] = total;
    }
    return result;
  }

  async function listDead(filter: DeadLetterFilter, limit = DEFAULT_LIST_LIMIT): Promise<DeadLetter[]> {
    const found = await matching(filter, Math.max(1, limit));
    return found.map(({ sink, job }) => ({
      sink,
      key: job.data.change.key,
      change: job.data.change,
      attempts: job.data.attempts,
      error: job.data.error,
      failedAt: job.data.failedAt,
    }));
  }

  /**
   * Runs `act` on every dead letter matching `filter`, one page of DEAD_PAGE per sink at a time
   * (memory stays bounded however many there are). `act` must remove the job from the dead queue,
   * so each page is read from the head again.
   */
  async function eachDead(
    filter: DeadLetterFilter,
    act: (job: Job<DeadChange>, queues: SinkQueues) => Promise<void>,
  ): Promise<number> {
    let done = 0;
    for (const [, queues] of selectSinks(filter)) {
      for (const shard of queues.shards) await buryFailedSlices(shard, queues.dead, logger);
      for (;;) {
        const page = await deadJobs(queues.dead, filter, DEAD_PAGE);
        page.sort((a, b) => a.data.failedAt - b.data.failedAt);
        for (const job of page) await act(job, queues);
        done += page.length;
        if (page.length < DEAD_PAGE || filter.key !== undefined) break;
      }
    }
    return done;
  }

  /**
   * Each change goes back as a one-change slice at the TAIL of its shard, with a fresh set of
   * attempts (the operator decided the cause is fixed), and only then leaves the dead queue.
   */
  function retryDead(filter: DeadLetterFilter): Promise<number> {
    return eachDead(filter, async (job, queues) => {
      const change = job.data.change;
      const tag = keys.of(change.source);
      let byShard = queues.byTag.get(tag);
      if (!byShard) {
        // A source no longer configured (a cluster keeps queues per source): its own queues.
        byShard = shardIndexes(opts.queue.shards).map((shard) => openShard(queues.sink, shard, tag));
        queues.byTag.set(tag, byShard);
        queues.shards.push(...byShard);
      }
      const shard = byShard[shardOf(change, byShard.length)]!;
      // Queued and counted in one transaction (one slot): the backlog stays exact.
      const client = (await shard.backend.client) as unknown as Redis;
      const tx = client.multi() as unknown as ChainableCommander;
      const jobId = retrySliceJobId(change);
      await new Job<ChangeSlice>(
        shard,
        COUNTED_SLICE,
        { changes: [change] },
        { ...sliceJobOptions(opts.queue), jobId },
        jobId,
      ).addJob(tx as never);
      // Counted only if the add got in (an add can meet NOSCRIPT inside the transaction).
      queueScript(tx, COUNT_IF_QUEUED, [shard.toKey(jobId), backlogKey(tag)], [queues.sink]);
      const failed = ((await tx.exec()) ?? []).find(([err]) => err);
      if (failed)
        throw new FeedsyncError(
          `cannot queue dead letter ${change.key} again: ${errorMessage(failed[0])}`,
          true,
        );
      await job.remove();
    });
  }

  function dropDead(filter: DeadLetterFilter): Promise<number> {
    return eachDead(filter, (job) => job.remove());
  }

  function close(): Promise<void> {
    closed ??= (async () => {
      await Promise.allSettled(
        [...queuesBySink.values()].flatMap((q) => [...q.shards, q.dead]).map((q) => q.close()),
      );
      await closeRedis(connection);
    })();
    return closed;
  }

  // BullMQ waits without limit for a first connection; `status` and `dlq` must fail instead of hang.
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const where = opts.queue.redis_url ? redactRedisUrl(opts.queue.redis_url) : 'redis';
  function bounded<A extends unknown[], R>(
    name: string,
    op: (...args: A) => Promise<R>,
  ): (...args: A) => Promise<R> {
    return async (...args: A) => {
      // Boxed: an operation's own undefined must not read as the deadline passing.
      const done = await withDeadline(
        op(...args).then((value) => ({ value })),
        timeoutMs,
      );
      if (!done) throw new FeedsyncError(`${name}: no answer from ${where} within ${timeoutMs} ms`, true);
      return done.value;
    };
  }

  return {
    counts: bounded('queue counts', counts),
    listDead: bounded('dlq list', listDead),
    retryDead: bounded('dlq retry', retryDead),
    dropDead: bounded('dlq drop', dropDead),
    close,
  };
}

/** A failed job that is not a slice counts as one (it stays in Redis; see buryFailedSlices). */
function undeliveredCount(job: Job): number {
  try {
    return undeliveredOf(job).length;
  } catch {
    return 1;
  }
}
