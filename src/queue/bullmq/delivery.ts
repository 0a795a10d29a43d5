// The BullMQ delivery side: one Worker per sink shard queue (on a Redis Cluster, per source too:
// a source's queues share its hash tag, names.ts), delivering slices (one job = the changes of one
// commit for that sink and shard, slice.ts) to sinks; slice-delivery.ts does one job.
//
// Order. Every shard queue has GLOBAL concurrency 1, so cluster-wide at most one slice per shard
// is in flight, a slice is delivered in feed order, and a subject always maps to the same shard:
// per-subject order holds across any number of `feedsync work` processes. In-flight slices per
// sink are therefore bounded by `queue.shards` cluster-wide (and per process); `queue.concurrency`
// further caps, per process, how many of a sink's shards deliver at once (a semaphore shared by
// that sink's workers). A sink with deliverBatch gets runs of a slice in one call (never two
// changes of one subject in a call); after a failed batch the job goes on one change at a time.
//
// Ownership. A worker delivers a slice only under the shard's lease (shard-lease.ts), checked by
// its monotonic clock before each sink call; a worker frozen past it hands the slice back.
//
// Progress. The job's progress is `{ done, attempts }` (attempts.ts): the delivered prefix of the
// slice and the attempts spent on change `done`. It is written after every sink call, fenced by the
// shard lease (sent without waiting for the answer): a process killed mid-slice restarts it from
// the last recorded `done`, delivering at most the calls in flight again (same keys; allowed),
// never skipping one.
//
// Retries. BullMQ's own backoff would move a failed job to "delayed" and let the shard carry on with
// the NEXT job, possibly of the same subject. So a retry-later failure of change i instead keeps the
// job at the head of its shard: we record `{ done: i, attempts: n }` in the job's progress (the job
// data stays the slice), rate-limit the shard queue for the backoff delay and throw RateLimitError.
// BullMQ's Worker.handleFailed then calls moveJobFromActiveToWait, which RPUSHes the id back onto
// the end of the wait list that moveToActive pops from (RPOPLPUSH), while new jobs are LPUSHed at
// the other end: the job is the next one taken, without consuming a BullMQ attempt, once the
// limiter key expires, and it resumes at change i. The limiter key is only honoured when a limiter
// `max` is configured (getRateLimitTTL.lua), hence the effectively unlimited limiter below. A stop
// uses the same move: the slice is handed back (RateLimitError) between changes or, at the
// deadline, in the middle of a sink call.
//
// Dead letters. When change i reaches `queue.attempts`, or the sink throws NeverError, the change
// alone goes to the sink's dead queue `<sink>.dead` (dead-letters.ts), progress becomes
// `{ done: i + 1, attempts: 0 }` and the slice carries on; it completes normally at its end. A slice
// that BullMQ fails itself (stalled more than `queue.attempts` times, or an unexpected error) lands
// in the shard's failed set; its undelivered changes are then buried in the dead queue too.
import { Job, Queue, RateLimitError, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { QueueConfig } from '../../config/types.js';
import { errorMessage } from '../../core/errors.js';
import type { PipelineEvents } from '../../core/events.js';
import type { DeliveryRunner, SinkRuntime } from '../queue.js';
import { sleep } from '../../backoff.js';
import { buryFailedSlice, buryFailedSlices, openDeadQueue, type DeadChange } from './dead-letters.js';
import { legacyQueuesPending, queuedIn } from './legacy-layout.js';
import { settledWithin } from './hand-back.js';
import { assertSinkName, KeySpace, shardIndexes, shardQueueName, workersKey } from './names.js';
import { closeRedis, createRedisConnection, redisEndpoint } from './redis.js';
import { warnRedisFailure } from './redis-monitor.js';
import { Semaphore, SemaphoreClosedError } from '../../semaphore.js';
import { RedisLeases } from '../../lease/redis-leases.js';
import { leaseOwner } from '../../lease/rule.js';
import { shardLease, shardLeaseSpec, type ShardLease } from './shard-lease.js';
import { deliverSlice, type SliceDeliveryContext } from './slice-delivery.js';
import { SliceJob, type ChangeSlice } from './slice.js';

export interface BullmqDeliveryOptions {
  queue: QueueConfig;
  sinks: SinkRuntime[];
  events: PipelineEvents;
  logger: Logger;
  /** Where the keys are (default: one Redis, queue.prefix). */
  keys?: KeySpace;
}

/** Never reached in practice; it only switches on BullMQ's limiter-key check (see above). */
const UNLIMITED = { max: 1_000_000_000, duration: 1_000 };

/** BullMQ's Worker, its jobs read as SliceJob does (each change from its own text). */
class SliceWorker extends Worker<ChangeSlice> {
  // BullMQ's documented hook for its own Job subclass.
  protected override get Job(): typeof Job {
    return SliceJob as unknown as typeof Job;
  }
}

interface ShardWorker {
  worker: Worker<ChangeSlice>;
  /** Its slices being delivered now. */
  active: Set<Promise<void>>;
}

/** Settles once no slice of `workers` is being delivered (those started meanwhile included). */
async function idle(workers: Iterable<ShardWorker>): Promise<void> {
  for (;;) {
    const active = [...workers].flatMap((w) => [...w.active]);
    if (active.length === 0) return;
    await Promise.allSettled(active);
  }
}

/**
 * What a stop may take past its deadline, for everything after the deliveries: BullMQ's
 * Worker.close() waits for its blocking connection, which never settles while that connection is
 * reconnecting (bullmq#4656), so no close is waited for past this.
 */
const CLOSE_MS = 1_000;

/** How often `work` looks whether the queues of the earlier cluster layout have drained. */
const LEGACY_CHECK_MS = 1_000;

export function createBullmqDelivery(opts: BullmqDeliveryOptions): DeliveryRunner {
  const config = opts.queue;
  for (const runtime of opts.sinks) assertSinkName(runtime.name);
  const keys = opts.keys ?? KeySpace.single(config.prefix);
  // Aborted shortly before the stop deadline: deliveries still running are handed back to the queue.
  const handBack = new AbortController();
  const stopRequested = new AbortController();
  const semaphores = new Map<string, Semaphore>();
  /** The workers running now: one per shard this process holds. */
  const shardWorkers = new Set<ShardWorker>();
  const queues: Queue[] = [];
  let connection: Redis | undefined;
  let leaseConnection: Redis | undefined;
  let leases: RedisLeases | undefined;
  let started: Promise<void> | undefined;
  let stopping: Promise<void> | undefined;

  function processorFor(
    ctx: SliceDeliveryContext,
    lease: ShardLease,
    semaphore: Semaphore,
    active: Set<Promise<void>>,
  ) {
    return (job: Job<ChangeSlice>, token?: string): Promise<void> => {
      const run = deliver(ctx, lease, semaphore, job, token);
      active.add(run);
      return run.finally(() => active.delete(run));
    };
  }

  async function deliver(
    ctx: SliceDeliveryContext,
    lease: ShardLease,
    semaphore: Semaphore,
    job: Job<ChangeSlice>,
    token: string | undefined,
  ): Promise<void> {
    let release: () => void;
    try {
      release = await semaphore.acquire();
    } catch (err) {
      if (err instanceof SemaphoreClosedError) throw new RateLimitError();
      throw err;
    }
    try {
      await deliverSlice(ctx, job, token ?? '', lease);
    } finally {
      release();
    }
  }

  /** A slice BullMQ failed itself: its undelivered changes become dead letters (see above). */
  async function buryFailed(ctx: SliceDeliveryContext, job: Job): Promise<void> {
    try {
      const buried = await buryFailedSlice(job, ctx.deadQueue, ctx.shardQueue);
      if (buried.length)
        opts.events.emit('delivery:finished', {
          sink: ctx.runtime.name,
          outcome: 'dead',
          // No sink call was made here: nothing to time (metrics skip a non-finite duration).
          durationSeconds: Number.NaN,
          changes: buried.map((change) => ({ key: change.key })),
          error: new Error(job.failedReason),
        });
      if (buried.length)
        ctx.logger.error(
          { job: job.id, changes: buried.length, err: job.failedReason },
          'slice failed; its undelivered changes are dead-lettered',
        );
      // BullMQ fails a slice whose completion met a Redis error even when every change was delivered.
      else
        ctx.logger.info(
          { job: job.id, err: job.failedReason },
          'slice failed after it was delivered; nothing to dead-letter',
        );
    } catch (err) {
      // It stays in the failed set; `dlq` buries it on its next look, and `status` counts it as dead.
      ctx.logger.error({ job: job.id, err: errorMessage(err) }, 'cannot dead-letter a failed slice');
    }
  }

  /**
   * Resolves once every worker runs. While Redis is unreachable that waits (BullMQ connects when it
   * can); a stop() meanwhile makes it resolve at once, with nothing left to start.
   */
  async function start(): Promise<void> {
    if (stopping) return;
    started ??= startWorkers();
    const stopped = new Promise<void>((resolve) => {
      if (stopRequested.signal.aborted) resolve();
      stopRequested.signal.addEventListener('abort', () => resolve(), { once: true });
    });
    await Promise.race([started, stopped]);
  }

  /**
   * Serves one shard queue while this process holds the shard's lease: a BullMQ worker runs on the
   * queue only then. When the lease is lost or handed over the worker closes (the slice in flight
   * is handed back) and the lease is released, then asked for again. Returns at stop(), or once
   * `until` aborts (a queue of an earlier layout drained).
   */
  async function serveShard(
    runtime: SinkRuntime,
    tag: string,
    shard: number,
    semaphore: Semaphore,
    deadQueue: Queue<DeadChange>,
    logger: Logger,
    until: AbortSignal,
  ): Promise<void> {
    const name = shardQueueName(runtime.name, shard);
    const shardQueue = new Queue<ChangeSlice>(name, { connection: connection!, prefix: tag });
    shardQueue.on('error', (err: Error) =>
      logger.debug({ queue: name, err: errorMessage(err) }, 'queue error'),
    );
    queues.push(shardQueue);
    await shardQueue.setGlobalConcurrency(1);
    const spec = shardLeaseSpec(tag, runtime.name, shard);
    const done = AbortSignal.any([stopRequested.signal, until]);
    while (!done.aborted) {
      const held = await leases!.acquire(spec, done);
      if (!held) return;
      // Slices failed while no worker was around to bury them (the process died first).
      await buryFailedSlices(shardQueue, deadQueue, logger).catch((err: unknown) =>
        logger.warn({ queue: name, err: errorMessage(err) }, 'cannot look for failed slices'),
      );
      if (done.aborted) {
        await held.release();
        return;
      }
      const lease = shardLease(
        leaseConnection!,
        config.prefix,
        tag,
        runtime.name,
        shard,
        held,
        config.lease_ttl_ms,
      );
      const ctx: SliceDeliveryContext = {
        runtime,
        shardQueue,
        deadQueue,
        config,
        events: opts.events,
        logger,
        // Lost or handed over: the slice goes back after the sink call in flight, which ends
        // before the lease is released (a hand-over never overlaps two deliverers).
        stopping: AbortSignal.any([done, held.lost]),
        handBack: handBack.signal,
      };
      const served = serveWhileHeld(ctx, name, tag, lease, semaphore);
      shardWorkers.add(served);
      await new Promise<void>((resolve) => {
        if (ctx.stopping.aborted) resolve();
        ctx.stopping.addEventListener('abort', () => resolve(), { once: true });
      });
      // stop() closes the workers within its budget, then the leases.
      if (stopRequested.signal.aborted) return;
      // The worker takes no further slice; the one in flight ends after its sink call. A lease
      // handed over stays renewed until released, so the next holder starts only after that call,
      // however long it takes; a lost one has expired by the TTL anyway.
      const closing = served.worker.close();
      if (held.handedOver()) await idle([served]);
      else await settledWithin(idle([served]), config.lease_ttl_ms);
      await held.release();
      // The close itself may hang on a reconnecting connection (CLOSE_MS): stop() deals with it.
      void closing.finally(() => shardWorkers.delete(served));
    }
  }

  function serveWhileHeld(
    ctx: SliceDeliveryContext,
    name: string,
    tag: string,
    lease: ShardLease,
    semaphore: Semaphore,
  ): ShardWorker {
    const { logger } = ctx;
    const active = new Set<Promise<void>>();
    const worker = new SliceWorker(name, processorFor(ctx, lease, semaphore, active), {
      connection: connection!,
      prefix: tag,
      concurrency: 1,
      autorun: false,
      limiter: UNLIMITED,
      // A stall (process killed mid-slice) counts like a failed attempt of the slice.
      maxStalledCount: config.attempts,
      // A killed consumer's job blocks its whole shard (global concurrency 1) until it is found
      // stalled. The job lock lasts as long as the shard lease (queue.lease_ttl_ms, default 15 s),
      // so the job comes free when the lease does, and a check every half of it bounds that to
      // ~1.5 TTL instead of BullMQ's default 30 + 30 s.
      lockDuration: config.lease_ttl_ms,
      stalledInterval: Math.max(500, Math.floor(config.lease_ttl_ms / 2)),
    });
    // Every shard's worker reports the same outage or refusal: one line, then a count.
    worker.on('error', (err: Error) =>
      warnRedisFailure(connection!, logger, err, { queue: name }, 'worker error'),
    );
    worker.on('failed', (job: Job | undefined) => {
      if (job) void buryFailed(ctx, job);
    });
    void worker.run().catch((err: unknown) => {
      logger.error({ queue: name, err: errorMessage(err) }, 'worker stopped with an error');
    });
    return { worker, active };
  }

  /** Once every queue of `old` is empty, stops serving them and starts `next` (legacy-layout.ts). */
  async function drainThen(
    sink: string,
    old: Queue[],
    drained: AbortController,
    next: () => void,
    logger: Logger,
  ): Promise<void> {
    for (;;) {
      if (stopRequested.signal.aborted) return;
      try {
        const left = await Promise.all(old.map((q) => queuedIn(q)));
        if (left.every((n) => n === 0)) break;
      } catch (err) {
        logger.warn(
          { sink, err: errorMessage(err) },
          'cannot check the queues of the earlier cluster layout; trying again',
        );
      }
      await sleep(LEGACY_CHECK_MS, stopRequested.signal);
    }
    drained.abort();
    logger.info(
      { sink },
      `sink ${sink} has delivered what the earlier cluster layout held; delivering from its new queues`,
    );
    next();
  }

  async function startWorkers(): Promise<void> {
    connection = createRedisConnection(redisEndpoint(config), 'worker', opts.logger);
    leaseConnection = createRedisConnection(redisEndpoint(config), 'lock', opts.logger);
    leases = new RedisLeases({
      client: leaseConnection,
      membersKey: workersKey(keys),
      owner: leaseOwner(),
      ttlMs: config.lease_ttl_ms,
      logger: opts.logger,
      groupSize: () => shardIndexes(config.shards).length,
      what: 'shard',
      holder: 'its consumer',
    });
    const never = new AbortController().signal;
    for (const runtime of opts.sinks) {
      const semaphore = new Semaphore(config.concurrency);
      semaphores.set(runtime.name, semaphore);
      const logger = opts.logger.child({ sink: runtime.name });
      const deadQueue: Queue<DeadChange> = openDeadQueue(runtime.name, connection, keys.shared, logger);
      queues.push(deadQueue);
      const serve = (queuesOf: { tag: string; shard: number }[], until: AbortSignal) => {
        for (const { tag, shard } of queuesOf)
          void serveShard(runtime, tag, shard, semaphore, deadQueue, logger, until).catch((err: unknown) => {
            if (!stopRequested.signal.aborted)
              logger.error({ tag, shard, err: errorMessage(err) }, 'shard consumer stopped with an error');
          });
      };
      // One queue per shard, under every queue tag (one on one Redis, one per source on a cluster).
      const current = () =>
        serve(
          keys.queueTags.flatMap((tag) => shardIndexes(config.shards).map((shard) => ({ tag, shard }))),
          never,
        );
      // A cluster written by an earlier release: its per-shard queues first (legacy-layout.ts).
      const legacy = await legacyQueuesPending(keys, runtime.name, (tag, shard) => {
        const queue = new Queue<ChangeSlice>(shardQueueName(runtime.name, shard), {
          connection: connection!,
          prefix: tag,
        });
        queue.on('error', () => undefined);
        queues.push(queue);
        return queue;
      });
      if (stopRequested.signal.aborted) return;
      if (legacy.length === 0) {
        current();
        continue;
      }
      logger.info(
        { queues: legacy.map((l) => `${l.tag}:${shardQueueName(runtime.name, l.shard)}`) },
        `delivering what sink ${runtime.name} has queued in the cluster layout of an earlier release before its new queues`,
      );
      const drained = new AbortController();
      serve(legacy, drained.signal);
      void drainThen(
        runtime.name,
        legacy.map((l) => l.queue),
        drained,
        current,
        logger,
      );
    }
    opts.logger.info(
      { sinks: opts.sinks.map((s) => s.name), shards: config.shards, concurrency: config.concurrency },
      'bullmq delivery started',
    );
  }

  function stop(timeoutMs: number): Promise<void> {
    stopping ??= (async () => {
      const deadline = Date.now() + Math.max(0, timeoutMs);
      const left = (): number => Math.max(0, deadline - Date.now());
      // Slices in flight stop after the change they are delivering and are handed back.
      stopRequested.abort();
      for (const semaphore of semaphores.values()) semaphore.close();
      // Leave a little of the budget for handing back in-flight deliveries and closing connections.
      const handBackTimer = setTimeout(
        () => handBack.abort(),
        Math.max(0, left() - Math.min(1_000, left() / 4)),
      );
      // start() may still be waiting for an unreachable Redis; it checks `stopRequested` between
      // steps. A step stuck on Redis holds no delivery, so it is not waited for past a second: the
      // workers it already started are closed gracefully all the same.
      await settledWithin(started ?? Promise.resolve(), Math.min(left(), 1_000));
      const closing = Promise.allSettled([...shardWorkers].map((s) => s.worker.close()));
      const graceful = await settledWithin(idle(shardWorkers), left());
      clearTimeout(handBackTimer);
      handBack.abort();
      // Past the deadline, one budget for the rest: the hand-backs, the closes, the leases.
      const end = Date.now() + CLOSE_MS;
      const rest = (): number => Math.max(0, end - Date.now());
      if (!graceful) {
        opts.logger.warn(
          { timeoutMs },
          'bullmq delivery did not stop in time; handing back the slices in flight',
        );
        await settledWithin(idle(shardWorkers), rest() / 2);
      }
      if (!(await settledWithin(closing, rest() / 2)))
        for (const s of shardWorkers) void s.worker.disconnect().catch(() => undefined);
      // Only now that no worker delivers: another process may take the shards at once.
      await settledWithin(leases?.close() ?? Promise.resolve(), rest());
      await settledWithin(Promise.allSettled(queues.map((q) => q.close())), rest());
      await Promise.allSettled([connection, leaseConnection].map((c) => c && closeRedis(c)));
    })();
    return stopping;
  }

  return { start, stop };
}
