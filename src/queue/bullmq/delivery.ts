// The BullMQ delivery side: one Worker per sink shard queue, delivering changes to sinks.
//
// Order. Every shard queue has GLOBAL concurrency 1, so cluster-wide at most one change per shard
// is in flight, and a subject always maps to the same shard: per-subject order holds across any
// number of `feedsync work` processes. In-flight deliveries per sink are therefore bounded by
// `queue.shards` cluster-wide (and per process); `queue.concurrency` further caps, per process,
// how many of a sink's shards deliver at once (a semaphore shared by that sink's workers).
//
// Retries. BullMQ's own backoff would move a failed job to "delayed" and let the shard carry on with
// the NEXT job, possibly of the same subject. So a retry-later failure instead keeps the job at the
// head of its shard: we record the attempt count in the job's progress (the job data stays the
// change), rate-limit the shard queue for the backoff delay and throw RateLimitError. BullMQ's
// Worker.handleFailed then calls moveJobFromActiveToWait, which RPUSHes the id back onto the end
// of the wait list that moveToActive pops from (RPOPLPUSH), while new jobs are LPUSHed at the other
// end: the job is the next one taken, without consuming a BullMQ attempt, once the limiter key
// expires. The limiter key is only honoured when a limiter `max` is configured
// (getRateLimitTTL.lua), hence the effectively unlimited limiter below.
//
// Dead letters. When our attempt count reaches `queue.attempts`, or the sink throws NeverError, the
// processor throws UnrecoverableError: the job lands in the failed set, which is never trimmed
// (removeOnFail: false) and is the sink's dead-letter list.
import { Queue, RateLimitError, UnrecoverableError, Worker, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { sleep } from '../../backoff.js';
import type { QueueConfig } from '../../config/types.js';
import { errorMessage } from '../../errors.js';
import type { Change } from '../../pipeline/change.types.js';
import type { PipelineEvents } from '../../pipeline/events.js';
import { afterRetryableFailure, classifyFailure } from '../delivery-policy.js';
import type { DeliveryRunner, SinkRuntime } from '../queue.js';
import { attemptsOf } from './attempts.js';
import { assertSinkName, bullPrefix, shardIndexes, shardQueueName } from './names.js';
import { closeRedis, createRedisConnection, requireRedisUrl } from './redis.js';
import { Semaphore, SemaphoreClosedError } from './semaphore.js';

export interface BullmqDeliveryOptions {
  queue: QueueConfig;
  sinks: SinkRuntime[];
  events: PipelineEvents;
  logger: Logger;
}

/** Never reached in practice; it only switches on BullMQ's limiter-key check (see above). */
const UNLIMITED = { max: 1_000_000_000, duration: 1_000 };

interface ShardWorker {
  worker: Worker<Change>;
  /** worker.run(): settles when the worker has closed. */
  running: Promise<void>;
}

export function createBullmqDelivery(opts: BullmqDeliveryOptions): DeliveryRunner {
  const config = opts.queue;
  for (const runtime of opts.sinks) assertSinkName(runtime.name);
  const prefix = bullPrefix(config.prefix);
  // Aborted shortly before the stop deadline: deliveries still running are handed back to the queue.
  const handBack = new AbortController();
  const stopRequested = new AbortController();
  const semaphores = new Map<string, Semaphore>();
  const shardWorkers: ShardWorker[] = [];
  const queues: Queue<Change>[] = [];
  let connection: Redis | undefined;
  let started: Promise<void> | undefined;
  let stopping: Promise<void> | undefined;

  function processorFor(runtime: SinkRuntime, queue: Queue<Change>, semaphore: Semaphore, logger: Logger) {
    return async (job: Job<Change>): Promise<void> => {
      const change = job.data;
      let release: () => void;
      try {
        release = await semaphore.acquire();
      } catch (err) {
        if (err instanceof SemaphoreClosedError) throw new RateLimitError();
        throw err;
      }
      try {
        await deliverOnce(runtime, queue, job, change, logger);
      } finally {
        release();
      }
    };
  }

  async function deliverOnce(
    runtime: SinkRuntime,
    queue: Queue<Change>,
    job: Job<Change>,
    change: Change,
    logger: Logger,
  ): Promise<void> {
    if (handBack.signal.aborted) throw new RateLimitError();
    const key = change.key;
    const started = performance.now();
    const seconds = (): number => (performance.now() - started) / 1000;
    try {
      await raceHandBack(runtime.sink.deliver(change), handBack.signal);
    } catch (err) {
      if (err instanceof HandedBack) throw new RateLimitError();
      const failure = classifyFailure(err);
      const next =
        failure.kind === 'never'
          ? { attempts: attemptsOf(job) + 1, delayMs: 0 }
          : afterRetryableFailure(failure, attemptsOf(job), config);
      const attempts = next.attempts;
      if (failure.kind === 'never' || attempts >= config.attempts) {
        await recordAttempts(job, attempts, logger);
        opts.events.emit('delivery:finished', {
          sink: runtime.name,
          outcome: 'dead',
          durationSeconds: seconds(),
          key,
          error: err,
        });
        const why =
          failure.kind === 'never' ? 'sink refused the change' : `gave up after ${attempts} attempts`;
        logger.warn({ key, attempts, err: errorMessage(err) }, `delivery dead-lettered: ${why}`);
        throw new UnrecoverableError(`sink ${runtime.name}: ${why}: ${errorMessage(err)}`);
      }
      const delay = next.delayMs;
      opts.events.emit('delivery:finished', {
        sink: runtime.name,
        outcome: 'retry',
        durationSeconds: seconds(),
        key,
        error: err,
      });
      logger.info({ key, attempts, delayMs: delay, err: errorMessage(err) }, 'delivery failed; will retry');
      try {
        await job.updateProgress(attempts);
        await queue.rateLimit(delay);
      } catch (bookkeeping) {
        // Without the limiter key the shard would retry at once; wait here instead (the worker keeps
        // renewing the job lock meanwhile). The attempt may go uncounted: Redis is failing anyway.
        logger.warn(
          { key, err: errorMessage(bookkeeping) },
          'cannot record retry in redis; waiting in-process',
        );
        await sleep(delay, handBack.signal);
      }
      throw new RateLimitError();
    }
    const occurredAt = Date.parse(change.occurred_at);
    opts.events.emit('delivery:finished', {
      sink: runtime.name,
      outcome: 'ok',
      durationSeconds: seconds(),
      endToEndSeconds: Number.isFinite(occurredAt)
        ? Math.max(0, (Date.now() - occurredAt) / 1000)
        : undefined,
      key,
    });
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

  async function startWorkers(): Promise<void> {
    connection = createRedisConnection(requireRedisUrl(config), 'worker', opts.logger);
    for (const runtime of opts.sinks) {
      const semaphore = new Semaphore(config.concurrency);
      semaphores.set(runtime.name, semaphore);
      const logger = opts.logger.child({ sink: runtime.name });
      for (const shard of shardIndexes(config.shards)) {
        // stop() may come while we wait for Redis here: start no more workers then.
        if (stopRequested.signal.aborted) return;
        const name = shardQueueName(runtime.name, shard);
        const queue = new Queue<Change>(name, { connection, prefix });
        queue.on('error', (err: Error) =>
          logger.debug({ queue: name, err: errorMessage(err) }, 'queue error'),
        );
        queues.push(queue);
        await queue.setGlobalConcurrency(1);
        if (stopRequested.signal.aborted) return;
        const worker = new Worker<Change>(name, processorFor(runtime, queue, semaphore, logger), {
          connection,
          prefix,
          concurrency: 1,
          autorun: false,
          limiter: UNLIMITED,
          // A stall (process killed mid-delivery) counts like a failed attempt.
          maxStalledCount: config.attempts,
          // A killed worker's job blocks its whole shard (global concurrency 1) until it is found
          // stalled: lock 10 s (renewed every 5 s while a delivery runs) and a check every 5 s
          // bound that to ~15 s instead of BullMQ's default 30 + 30 s.
          lockDuration: 10_000,
          stalledInterval: 5_000,
        });
        worker.on('error', (err: Error) =>
          logger.warn({ queue: name, err: errorMessage(err) }, 'worker error'),
        );
        const running = worker.run().catch((err: unknown) => {
          logger.error({ queue: name, err: errorMessage(err) }, 'worker stopped with an error');
        });
        shardWorkers.push({ worker, running });
      }
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
      stopRequested.abort();
      for (const semaphore of semaphores.values()) semaphore.close();
      // Leave a little of the budget for handing back in-flight deliveries and closing connections.
      const handBackTimer = setTimeout(
        () => handBack.abort(),
        Math.max(0, left() - Math.min(1_000, left() / 4)),
      );
      // start() may still be waiting for an unreachable Redis; it checks `stopRequested` between steps.
      const startSettled = await withDeadline(started?.catch(() => undefined) ?? Promise.resolve(), left());
      const graceful =
        startSettled &&
        (await withDeadline(Promise.allSettled(shardWorkers.map((s) => s.worker.close())), left()));
      clearTimeout(handBackTimer);
      handBack.abort();
      if (!graceful) {
        opts.logger.warn({ timeoutMs }, 'bullmq delivery did not stop in time; disconnecting');
        await Promise.allSettled(shardWorkers.map((s) => s.worker.disconnect()));
      }
      await withDeadline(Promise.allSettled(queues.map((q) => q.close())), 1_000);
      if (connection) await closeRedis(connection);
      await withDeadline(Promise.allSettled(shardWorkers.map((s) => s.running)), 1_000);
    })();
    return stopping;
  }

  return { start, stop };
}

class HandedBack extends Error {}

/** Resolve/reject with `work`, or reject with HandedBack once `signal` aborts (work keeps running). */
function raceHandBack<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    work.catch(() => undefined);
    return Promise.reject(new HandedBack());
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => {
      // The sink's promise settles later on its own; nobody is listening any more.
      work.catch(() => undefined);
      reject(new HandedBack());
    };
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(err);
      },
    );
  });
}

async function recordAttempts(job: Job<Change>, attempts: number, logger: Logger): Promise<void> {
  try {
    await job.updateProgress(attempts);
  } catch (err) {
    logger.warn({ key: job.data.key, err: errorMessage(err) }, 'cannot record attempt count in redis');
  }
}

/** true when `work` settled within ms, false on timeout (work keeps running). */
async function withDeadline(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([work.then(() => true as const), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
