// Helpers for the BullMQ driver tests: changes, recording sinks (the one of test/queue/support.ts,
// and one taking real batches), a config per test.
import { randomUUID } from 'node:crypto';
import { Queue, type JobType } from 'bullmq';
import { Redis } from 'ioredis';
import { pino, type Logger } from 'pino';
import { afterAll, beforeAll } from 'vitest';
import type { QueueConfig, SinkFilter } from '../../src/config/types.js';
import { NeverError, RetryLaterError } from '../../src/core/errors.js';
import type { Change } from '../../src/core/change.js';
import { PipelineEvents } from '../../src/core/events.js';
import { createBullmqDelivery } from '../../src/queue/bullmq/delivery.js';
import { createBullmqProducer, type BullmqProducer } from '../../src/queue/bullmq/producer.js';
import type { ChangeSlice } from '../../src/queue/bullmq/slice.js';
import type { DeliveryRunner } from '../../src/queue/queue.js';
import type { Sink } from '../../src/sinks/sink.js';
import { makeChange as buildChange } from '../../src/testing/make-change.js';
import { RecordingSink, type FailurePlan, type SharedRecord } from '../queue/support.js';
import { startRedis, type RedisServer } from '../support/redis.js';

export { RecordingSink, type SharedRecord } from '../queue/support.js';

export const silentLogger: Logger = pino({ level: 'silent' });

export const ANY: SinkFilter = { sources: [], services: [], event_types: [], resource_types: [] };

/** A queue config with a fresh prefix, so tests sharing one Redis never see each other's keys. */
export function queueConfig(redisUrl: string, overrides: Partial<QueueConfig> = {}): QueueConfig {
  return {
    driver: 'bullmq',
    redis_url: redisUrl,
    prefix: `t-${randomUUID().slice(0, 8)}`,
    attempts: 5,
    backoff_ms: 20,
    max_backoff_ms: 100,
    concurrency: 4,
    max_backlog: 10_000,
    retain_completed_ms: 3_600_000,
    retain_completed_count: 100_000,
    shards: 4,
    lease_ttl_ms: 15_000,
    allow_volatile_redis: false,
    min_replicas_acked: 0,
    delivery_timeout_ms: 60000,
    ...overrides,
  };
}

/**
 * Change `eventId` of source `scheduling`, of type `eventType` (default `title_updated`) about
 * `subject` (a subject URL; default: the change's own title).
 */
export function makeChange(eventId: number, opts: { subject?: string; eventType?: string } = {}): Change {
  const eventType = opts.eventType ?? 'title_updated';
  const i = eventType.lastIndexOf('_');
  return buildChange({
    event_id: eventId,
    event_type: eventType,
    resource_type: eventType.slice(0, i),
    operation: eventType.slice(i + 1),
    ...(opts.subject === undefined ? {} : { subject_url: opts.subject }),
  });
}

/**
 * A RecordingSink that also takes batches (like the jsonl and sqlite sinks): records every batch,
 * notes any batch holding two changes of one subject, and can be told to fail a batch as a whole.
 */
export class BatchRecordingSink extends RecordingSink {
  readonly batches: Change[][] = [];
  readonly sameSubjectBatches: string[][] = [];

  constructor(
    private readonly batchPlan: {
      fail?: FailurePlan;
      latencyMs?: () => number;
      failBatch?: (batch: Change[]) => Error | undefined;
    } = {},
    shared?: SharedRecord,
  ) {
    super({ fail: batchPlan.fail, latencyMs: batchPlan.latencyMs }, shared);
  }

  override async deliverBatch(changes: Change[]): Promise<void> {
    this.batches.push(changes);
    const subjects = changes.map((c) => c.subject_url ?? c.key);
    if (new Set(subjects).size !== subjects.length) this.sameSubjectBatches.push(changes.map((c) => c.key));
    const leave = changes.map((c) => this.enter(c));
    try {
      const latency = this.batchPlan.latencyMs?.() ?? 0;
      if (latency > 0) await new Promise((r) => setTimeout(r, latency));
      const failure = this.batchPlan.failBatch?.(changes);
      if (failure) throw failure;
      this.delivered.push(...changes);
      this.shared?.log.push(...changes);
    } finally {
      for (const l of leave) l();
    }
  }
}

export const retryLater = (message = 'try later'): Error => new RetryLaterError(message);
export const never = (message = 'bad change'): Error => new NeverError(message);

/** Poll `check` until it returns true; fails with `what` after `timeoutMs`. Bounded by design. */
export async function waitFor(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

export function range(from: number, count: number): number[] {
  return Array.from({ length: count }, (_, i) => from + i);
}

/** The delivery runner of a single sink, with its own event bus and a silent logger. */
export function deliveryFor(config: QueueConfig, name: string, sink: Sink): DeliveryRunner {
  return createBullmqDelivery({
    queue: config,
    sinks: [{ name, sink }],
    events: new PipelineEvents(),
    logger: silentLogger,
  });
}

/** A producer for a single unfiltered sink that does not keep cursors. */
export function producerFor(config: QueueConfig, name: string): BullmqProducer {
  return createBullmqProducer({
    queue: config,
    sinks: [{ name, filter: ANY }],
    logger: silentLogger,
  });
}

/** The slice jobs of every shard queue of a sink in Redis (any state), with their data. */
export async function sliceJobs(
  config: QueueConfig,
  sink: string,
  states: JobType[] = ['wait', 'active', 'delayed', 'completed', 'failed'],
): Promise<{ queue: string; id: string; changes: Change[]; progress: unknown }[]> {
  const found: { queue: string; id: string; changes: Change[]; progress: unknown }[] = [];
  const connection = new Redis(config.redis_url!);
  try {
    for (let shard = 0; shard < config.shards; shard++) {
      const queue = new Queue<ChangeSlice>(`${sink}.${shard}`, { connection, prefix: `{${config.prefix}}` });
      try {
        for (const job of await queue.getJobs(states, 0, -1, true))
          if (job)
            found.push({ queue: queue.name, id: job.id!, changes: job.data.changes, progress: job.progress });
      } finally {
        await queue.close();
      }
    }
  } finally {
    connection.disconnect();
  }
  return found;
}

/**
 * A private redis-server for one test file, with a plain client on it: started before the file's
 * tests, stopped after them. Read `server` and `client` inside tests (they are set by then).
 */
export function useRedis(): { readonly server: RedisServer; readonly client: Redis } {
  const ctx = {} as { server: RedisServer; client: Redis };
  beforeAll(async () => {
    ctx.server = await startRedis();
    ctx.client = new Redis(ctx.server.url);
  });
  afterAll(async () => {
    ctx.client?.disconnect();
    await ctx.server?.stop();
  });
  return ctx;
}
