// `status` and `dlq` for the BullMQ driver. A sink's numbers are summed over its shard queues; its
// dead-letter list is the union of their failed sets.
import { Queue, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { pino, type Logger } from 'pino';
import type { QueueConfig } from '../../config/types.js';
import { FeedsyncError, errorMessage } from '../../errors.js';
import type { Change } from '../../pipeline/change.types.js';
import type { DeadLetter, DeadLetterFilter, QueueAdmin, SinkJobCounts } from '../queue.js';
import { attemptsOf } from './attempts.js';
import { assertSinkName, bullPrefix, jobIdForKey, shardIndexes, shardQueueName } from './names.js';
import { closeRedis, createRedisConnection, redactRedisUrl, requireRedisUrl } from './redis.js';

export interface BullmqAdminOptions {
  queue: QueueConfig;
  sinkNames: string[];
  logger?: Logger;
  /** A connection to use instead of one made from `queue.redis_url`; the caller keeps ownership. */
  connection?: Redis;
  /** Fail an operation that gets no answer from Redis within this long (default 10 s). */
  timeoutMs?: number;
}

export type BullmqAdmin = QueueAdmin & { close(): Promise<void> };

const DEFAULT_LIST_LIMIT = 100;
const DEFAULT_TIMEOUT_MS = 10_000;

export function createBullmqAdmin(opts: BullmqAdminOptions): BullmqAdmin {
  for (const sink of opts.sinkNames) assertSinkName(sink);
  const logger = opts.logger ?? pino({ level: 'silent' });
  const ownConnection = !opts.connection;
  const connection = opts.connection ?? createRedisConnection(requireRedisUrl(opts.queue), 'admin', logger);
  const prefix = bullPrefix(opts.queue.prefix);
  const queuesBySink = new Map<string, Queue<Change>[]>();
  for (const sink of opts.sinkNames) {
    queuesBySink.set(
      sink,
      shardIndexes(opts.queue.shards).map((shard) => {
        const queue = new Queue<Change>(shardQueueName(sink, shard), { connection, prefix });
        // Failures reach callers as rejections; this only keeps BullMQ from printing each one.
        queue.on('error', (err: Error) => logger.debug({ sink, err: errorMessage(err) }, 'queue error'));
        return queue;
      }),
    );
  }
  let closed: Promise<void> | undefined;

  function selectSinks(filter: DeadLetterFilter): [string, Queue<Change>[]][] {
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

  /** Dead jobs of one shard queue matching the filter; `limit` undefined = all. */
  async function deadJobs(
    queue: Queue<Change>,
    filter: DeadLetterFilter,
    limit?: number,
  ): Promise<Job<Change>[]> {
    if (filter.key !== undefined) {
      // A key lives in exactly one shard, but which one depends on its subject: look in each.
      const job = await queue.getJob(jobIdForKey(filter.key));
      return job && (await job.isFailed()) ? [job] : [];
    }
    const end = limit === undefined ? -1 : limit - 1;
    const jobs = await queue.getJobs(['failed'], 0, end, true);
    return jobs.filter((job): job is Job<Change> => Boolean(job));
  }

  async function matching(
    filter: DeadLetterFilter,
    limit?: number,
  ): Promise<{ sink: string; job: Job<Change> }[]> {
    const found: { sink: string; job: Job<Change> }[] = [];
    for (const [sink, queues] of selectSinks(filter)) {
      for (const queue of queues) {
        for (const job of await deadJobs(queue, filter, limit)) found.push({ sink, job });
      }
    }
    found.sort((a, b) => (a.job.finishedOn ?? 0) - (b.job.finishedOn ?? 0));
    return limit === undefined ? found : found.slice(0, limit);
  }

  async function counts(): Promise<Record<string, SinkJobCounts>> {
    const result: Record<string, SinkJobCounts> = {};
    for (const [sink, queues] of queuesBySink) {
      const total: SinkJobCounts = { waiting: 0, active: 0, delayed: 0, failed: 0, dead: 0 };
      for (const queue of queues) {
        const c = await queue.getJobCounts('wait', 'active', 'delayed', 'failed');
        total.waiting += c.wait ?? 0;
        total.active += c.active ?? 0;
        total.delayed += c.delayed ?? 0;
        total.dead += c.failed ?? 0;
        // A change waiting for its next attempt stays at the head of its shard (see delivery.ts), so
        // peeking at the one job per shard that moves next finds all of them.
        const [head] = await queue.getJobs(['wait'], 0, 0, true);
        if (head && attemptsOf(head) > 0) total.failed += 1;
      }
      result[sink] = total;
    }
    return result;
  }

  async function listDead(filter: DeadLetterFilter, limit = DEFAULT_LIST_LIMIT): Promise<DeadLetter[]> {
    const found = await matching(filter, Math.max(1, limit));
    return found.map(({ sink, job }) => ({
      sink,
      key: job.data.key,
      change: job.data,
      attempts: attemptsOf(job) || job.attemptsMade,
      error: job.failedReason ?? '',
      failedAt: job.finishedOn ?? 0,
    }));
  }

  async function retryDead(filter: DeadLetterFilter): Promise<number> {
    let retried = 0;
    for (const { job } of await matching(filter)) {
      // A fresh set of attempts: the operator decided the cause is fixed.
      await job.updateProgress(0);
      await job.retry('failed');
      retried++;
    }
    return retried;
  }

  async function dropDead(filter: DeadLetterFilter): Promise<number> {
    let dropped = 0;
    for (const { job } of await matching(filter)) {
      await job.remove();
      dropped++;
    }
    return dropped;
  }

  function close(): Promise<void> {
    closed ??= (async () => {
      await Promise.allSettled([...queuesBySink.values()].flat().map((q) => q.close()));
      if (ownConnection) await closeRedis(connection);
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
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new FeedsyncError(`${name}: no answer from ${where} within ${timeoutMs} ms`, true)),
          timeoutMs,
        );
      });
      try {
        return await Promise.race([op(...args), timeout]);
      } finally {
        clearTimeout(timer);
      }
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
