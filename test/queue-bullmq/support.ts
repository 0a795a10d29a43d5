// Helpers for the BullMQ driver tests: changes, recording sinks, a config per test.
import { randomUUID } from 'node:crypto';
import { Queue, type JobType } from 'bullmq';
import { Redis } from 'ioredis';
import { pino, type Logger } from 'pino';
import type { QueueConfig, SinkFilter } from '../../src/config/types.js';
import { NeverError, RetryLaterError } from '../../src/core/errors.js';
import type { Change } from '../../src/core/change.js';
import { PipelineEvents } from '../../src/core/events.js';
import { createBullmqDelivery } from '../../src/queue/bullmq/delivery.js';
import { createBullmqProducer, type BullmqProducer } from '../../src/queue/bullmq/producer.js';
import type { ChangeSlice } from '../../src/queue/bullmq/slice.js';
import type { DeliveryRunner } from '../../src/queue/queue.js';
import type { Sink } from '../../src/sinks/sink.js';

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
    ...overrides,
  };
}

export function makeChange(
  eventId: number,
  opts: { source?: string; subject?: string; eventType?: string } = {},
): Change {
  const source = opts.source ?? 'scheduling';
  const eventType = opts.eventType ?? 'title_updated';
  const [resourceType, operation] =
    eventType === 'title_updated' ? ['title', 'updated'] : splitType(eventType);
  const subject = opts.subject ?? `http://127.0.0.1:1/scheduling/api/titles/${eventId}`;
  return {
    schema: 'feedsync.change.v1',
    key: `${source}:${eventId}`,
    source,
    service: 'scheduling',
    event_id: eventId,
    event_type: eventType,
    resource_type: resourceType,
    operation,
    occurred_at: new Date(Date.now() - 1_000).toISOString(),
    changes: ['name'],
    event_url: `http://127.0.0.1:1/scheduling/api/events/${eventId}`,
    subject_url: subject,
    subject_state: 'present',
    subject: { resource_type: resourceType, id: eventId, name: `Title ${eventId}` },
    source_rule: null,
  };
}

function splitType(eventType: string): [string, string] {
  const i = eventType.lastIndexOf('_');
  return [eventType.slice(0, i), eventType.slice(i + 1)];
}

type FailurePlan = (change: Change, attempt: number) => Error | undefined;

/**
 * A sink that records every successful delivery in order, counts attempts per key, can be told to
 * fail (RetryLaterError / NeverError / anything) and to take time, and checks that no two changes
 * of one subject are ever in flight at once.
 */
export class RecordingSink implements Sink {
  readonly delivered: Change[] = [];
  readonly attempts = new Map<string, number>();
  readonly overlaps: string[] = [];
  protected readonly inFlight = new Map<string, number>();
  closed = false;

  constructor(
    protected readonly plan: { fail?: FailurePlan; latencyMs?: () => number } = {},
    /** Shared between sinks standing for the same sink in different processes. */
    protected readonly shared?: SharedRecord,
  ) {}

  /** Mark the change's subject in flight (recording an overlap if it already was); returns the unmark. */
  protected enter(change: Change): () => void {
    const subject = change.subject_url ?? change.key;
    const inFlight = this.shared?.inFlight ?? this.inFlight;
    const overlaps = this.shared?.overlaps ?? this.overlaps;
    if ((inFlight.get(subject) ?? 0) > 0) overlaps.push(`${subject} (${change.key})`);
    inFlight.set(subject, (inFlight.get(subject) ?? 0) + 1);
    return () => inFlight.set(subject, (inFlight.get(subject) ?? 1) - 1);
  }

  async deliver(change: Change): Promise<void> {
    const leave = this.enter(change);
    try {
      const attempt = (this.attempts.get(change.key) ?? 0) + 1;
      this.attempts.set(change.key, attempt);
      const latency = this.plan.latencyMs?.() ?? 0;
      if (latency > 0) await new Promise((r) => setTimeout(r, latency));
      const failure = this.plan.fail?.(change, attempt);
      if (failure) throw failure;
      this.delivered.push(change);
      this.shared?.log.push(change);
    } finally {
      leave();
    }
  }

  keys(): string[] {
    return this.delivered.map((c) => c.key);
  }

  async close(): Promise<void> {
    this.closed = true;
  }
}

export interface SharedRecord {
  inFlight: Map<string, number>;
  overlaps: string[];
  log: Change[];
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

  async deliverBatch(changes: Change[]): Promise<void> {
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
