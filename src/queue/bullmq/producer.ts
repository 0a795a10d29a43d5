// The BullMQ producer: queues every change of a page for every sink whose filter it passes and
// saves the source's cursor in Redis, both in one transaction (page-commit.ts), fenced by the
// source's lease when the producer is given leases. One job per (page, sink, shard): a slice of the
// page's changes in feed order (slice.ts), with a deterministic id.
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { QueueConfig, SinkFilter } from '../../config/types.js';
import { FeedsyncError, errorMessage } from '../../core/errors.js';
import type { Change } from '../../core/change.js';
import { passesFilter } from '../../sinks/filter.js';
import type { ChangeQueue, PageCommit } from '../queue.js';
import type { RedisSourceLeases } from './lease.js';
import { assertSinkName, backlogKey, bullPrefix, shardIndexes, shardOf, shardQueueName } from './names.js';
import { createPageCommitter, LeaseFencedError, type PlannedSlice } from './page-commit.js';
import { closeRedis, createRedisConnection, requireRedisUrl } from './redis.js';
import { sliceJobId, sliceJobOptions, type ChangeSlice } from './slice.js';

export interface BullmqProducerOptions {
  queue: QueueConfig;
  sinks: { name: string; filter: SinkFilter }[];
  logger: Logger;
  /**
   * This replica's leases: a page of a source is committed only while its lease is held, and the
   * commit is fenced by it. Without leases commits are unfenced (one-off tools, tests).
   */
  leases?: Pick<RedisSourceLeases, 'fence' | 'markLost'>;
  /** A connection to use instead of one made from `queue.redis_url`; the caller keeps ownership. */
  connection?: Redis;
  /** Give up on a page after this long (default 10 s); see commitPage. */
  addTimeoutMs?: number;
}

export type BullmqProducer = ChangeQueue & { close(): Promise<void> };

/** maxBacklog() is asked before every poll; a second-old answer is plenty for back-pressure. */
const BACKLOG_CACHE_MS = 1_000;
const DEFAULT_ADD_TIMEOUT_MS = 10_000;

export function createBullmqProducer(opts: BullmqProducerOptions): BullmqProducer {
  const config = opts.queue;
  for (const sink of opts.sinks) assertSinkName(sink.name);
  const ownConnection = !opts.connection;
  const connection =
    opts.connection ?? createRedisConnection(requireRedisUrl(config), 'producer', opts.logger);
  const prefix = bullPrefix(config.prefix);
  const shards = shardIndexes(config.shards);
  const addTimeoutMs = opts.addTimeoutMs ?? DEFAULT_ADD_TIMEOUT_MS;
  const jobOptions = sliceJobOptions(config);
  // Commits WATCH the lease token, which needs a connection nothing else runs transactions on.
  const commitConnection = opts.connection
    ? opts.connection.duplicate()
    : createRedisConnection(requireRedisUrl(config), 'producer', opts.logger);
  const committer = createPageCommitter({ connection: commitConnection, prefix: config.prefix, jobOptions });

  const sinks = opts.sinks.map((sink) => ({
    name: sink.name,
    filter: sink.filter,
    /** For counting (backlog). */
    queues: shards.map(
      (shard) => new Queue<ChangeSlice>(shardQueueName(sink.name, shard), { connection, prefix }),
    ),
    /** The same queues on the commit connection: jobs are added through these. */
    commitQueues: shards.map(
      (shard) =>
        new Queue<ChangeSlice>(shardQueueName(sink.name, shard), { connection: commitConnection, prefix }),
    ),
  }));
  for (const sink of sinks) {
    for (const q of [...sink.queues, ...sink.commitQueues]) {
      // Errors also surface as commitPage rejections; this only keeps them from being unhandled.
      q.on('error', (err: Error) =>
        opts.logger.debug({ sink: sink.name, err: errorMessage(err) }, 'queue error'),
      );
    }
  }

  let backlogCache: { value: number; at: number } | undefined;
  let backlogInFlight: Promise<number> | undefined;
  /** Changes this producer has queued (the largest sink's share of each page), counted in between reads. */
  let queuedTotal = 0;
  let closed: Promise<void> | undefined;

  /**
   * Resolves with the changes queued per sink (every sink listed, 0 included). Throws, having
   * written nothing, when Redis fails or the lease of the source is no longer ours.
   */
  async function commitPage(commit: PageCommit): Promise<Record<string, number>> {
    if (closed)
      throw new FeedsyncError(`bullmq producer is closed; cannot queue page of ${commit.source}`, true);
    const fence = opts.leases?.fence(commit.source);
    if (opts.leases && !fence)
      throw new LeaseFencedError(commit.source, 'this replica does not hold the lease');
    const slices: PlannedSlice[] = [];
    const queued: Record<string, number> = {};
    for (const sink of sinks) {
      queued[sink.name] = 0;
      // Group by shard while keeping feed order inside each shard: that is the order workers see.
      const perShard = new Map<number, Change[]>();
      for (const change of commit.changes) {
        if (!passesFilter(sink.filter, change)) continue;
        const shard = shardOf(change, sink.queues.length);
        const list = perShard.get(shard) ?? [];
        list.push(change);
        perShard.set(shard, list);
        queued[sink.name]! += 1;
      }
      for (const [shard, changes] of perShard)
        slices.push({ queue: sink.commitQueues[shard]!, jobId: sliceJobId(changes), changes });
    }
    const plan = {
      source: commit.source,
      slices,
      queued,
      cursor: commit.cursor,
      seenAbove: commit.seenAbove,
    };
    // With the offline queue off, a dropped connection fails at once; but BullMQ waits for the very
    // first "ready" without limit, so a Redis that was never reachable would hang the poller.
    const result = await withDeadline(
      committer.commit(plan, fence).then(
        (value) => ({ ok: true as const, value }),
        (reason: unknown) => ({ ok: false as const, reason }),
      ),
      addTimeoutMs,
    );
    if (!result || !result.ok) {
      const reason = result ? result.reason : new Error(`no answer from redis within ${addTimeoutMs} ms`);
      if (reason instanceof LeaseFencedError) {
        opts.leases?.markLost(commit.source, reason.message);
        throw reason;
      }
      // A connection that answers nothing (a socket dead without a reset, a Redis that froze and
      // restarted behind it) is never dropped by ioredis on its own: every later commit would time
      // out on it too. Drop it; ioredis reconnects, and the page is retried on a fresh socket.
      if (!result || /timed out/i.test(errorMessage(reason))) commitConnection.disconnect(true);
      // Nothing was written (or a late write lands whole; the retry then finds the cursor there).
      throw new FeedsyncError(
        `cannot queue page of source ${commit.source} (cursor ${commit.cursor}) in Redis: ${errorMessage(reason)}`,
        true,
        { cause: reason },
      );
    }
    // Counted in at once (the next recount replaces the sum with Redis's figures), so the poller
    // never has to wait for a recount on its critical path.
    const added = Math.max(0, ...Object.values(queued));
    queuedTotal += added;
    if (backlogCache) backlogCache.value += added;
    return queued;
  }

  /** The largest sink backlog in changes: the counters the commits and the workers keep (page-commit.ts). */
  async function computeBacklog(): Promise<number> {
    // Through a queue's client: it waits for the first connection, as the commits do.
    const first = sinks[0]?.queues[0];
    const client = first ? ((await first.backend.client) as unknown as Redis) : connection;
    const counts = await client.hmget(backlogKey(opts.queue.prefix), ...sinks.map((s) => s.name));
    return Math.max(0, ...counts.map((n) => Number(n ?? 0)));
  }

  /**
   * Asked before every poll. Recounting takes a round trip per shard queue, as long as a whole page
   * commit, so a known figure is answered at once and refreshed in the background once it is a
   * second old; only the very first call waits for a count.
   */
  async function maxBacklog(): Promise<number> {
    const fresh = backlogCache && Date.now() - backlogCache.at < BACKLOG_CACHE_MS;
    if (!fresh && !backlogInFlight) {
      const before = queuedTotal;
      backlogInFlight = computeBacklog()
        .then((counted) => {
          // Pages committed while Redis was being counted may be missing from its figures: add
          // them (possibly twice; over-estimating is the safe side until the next recount).
          const value = counted + (queuedTotal - before);
          backlogCache = { value, at: Date.now() };
          return value;
        })
        .finally(() => {
          backlogInFlight = undefined;
        });
      // A failed background recount keeps the last figure; the next call tries again.
      backlogInFlight.catch(() => undefined);
    }
    return backlogCache ? backlogCache.value : backlogInFlight!;
  }

  function close(): Promise<void> {
    closed ??= (async () => {
      await Promise.allSettled(
        sinks.flatMap((sink) => [...sink.queues, ...sink.commitQueues].map((q) => q.close())),
      );
      await closeRedis(commitConnection);
      if (ownConnection) await closeRedis(connection);
    })();
    return closed;
  }

  return { commitPage, maxBacklog, close };
}

/** The settled value, or undefined when `work` took longer than `ms` (it keeps running: a late
 * commit lands whole, and the retry of the page finds its cursor in Redis and adds nothing). */
async function withDeadline<T>(work: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
