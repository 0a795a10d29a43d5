import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { QueueConfig } from '../../src/config/types.js';
import { PipelineEvents, type PipelineEventMap } from '../../src/core/events.js';
import { createBullmqAdmin, type BullmqAdmin } from '../../src/queue/bullmq/admin.js';
import { createBullmqDelivery } from '../../src/queue/bullmq/delivery.js';
import { bullPrefix, shardQueueName } from '../../src/queue/bullmq/names.js';
import { createBullmqProducer, type BullmqProducer } from '../../src/queue/bullmq/producer.js';
import { UNCOUNTED_SLICE } from '../../src/queue/bullmq/slice.js';
import { holdSource } from '../../src/queue/bullmq/source-hold.js';
import type { DeliveryRunner } from '../../src/queue/queue.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import {
  ANY,
  BatchRecordingSink,
  RecordingSink,
  makeChange,
  never,
  queueConfig,
  range,
  retryLater,
  silentLogger,
  sliceJobs,
  waitFor,
} from './support.js';

let redis: RedisServer;
const cleanups: (() => Promise<void>)[] = [];

beforeAll(async () => {
  redis = await startRedis();
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
afterAll(async () => {
  await redis.stop();
});

interface Harness {
  producer: BullmqProducer;
  admin: BullmqAdmin;
  runner: DeliveryRunner;
  /** One entry per change settled (an event covers a whole sink call). */
  finished: { outcome: PipelineEventMap['delivery:finished']['outcome']; key: string; at: number }[];
}

function harness(config: QueueConfig, sinks: Record<string, RecordingSink>): Harness {
  const names = Object.keys(sinks);
  const producer = createBullmqProducer({
    queue: config,
    sinks: names.map((name) => ({ name, filter: ANY })),
    logger: silentLogger,
  });
  const admin = createBullmqAdmin({ queue: config, sinkNames: names });
  const events = new PipelineEvents();
  const finished: Harness['finished'] = [];
  events.on('delivery:finished', (e) => {
    for (const { key } of e.changes) finished.push({ outcome: e.outcome, key, at: Date.now() });
  });
  const runner = createBullmqDelivery({
    queue: config,
    sinks: names.map((name) => ({ name, sink: sinks[name]! })),
    events,
    logger: silentLogger,
  });
  cleanups.push(
    () => producer.close(),
    () => admin.close(),
    () => runner.stop(5_000),
  );
  return { producer, admin, runner, finished };
}

describe('bullmq delivery', () => {
  it('admin operations fail with a clear error instead of hanging when Redis is unreachable', async () => {
    const down = await startRedis();
    await down.stop();
    const config = { ...queueConfig(down.url), redis_url: `redis://admin:s3cret@127.0.0.1:${down.port}` };
    const admin = createBullmqAdmin({ queue: config, sinkNames: ['hook'], timeoutMs: 500 });
    try {
      const err = await admin.counts().then(
        () => undefined,
        (e: unknown) => e as Error,
      );
      expect(err?.message).toMatch(
        new RegExp(`queue counts: no answer from redis://127.0.0.1:${down.port}.* within 500 ms`),
      );
      expect(err?.message).not.toContain('s3cret');
      await expect(admin.listDead({})).rejects.toThrow(/dlq list/);
    } finally {
      await admin.close();
    }
  });
});

describe('bullmq slices', () => {
  it('gives a sink with deliverBatch multi-change batches, never two changes of one subject in one', async () => {
    const config = queueConfig(redis.url, { shards: 2, concurrency: 2 });
    const file = new BatchRecordingSink();
    const h = harness(config, { file });
    // 6 subjects, 60 changes: each slice repeats subjects, so batches must stop before a repeat.
    const changes = range(1, 60).map((id) => makeChange(id, { subject: `s${id % 6}` }));
    await h.producer.commitPage({ source: 'scheduling', changes, cursor: 60, seenAbove: [] });
    await h.runner.start();
    await waitFor('60 deliveries', () => file.delivered.length >= 60);
    await new Promise((r) => setTimeout(r, 200));
    expect(file.keys().sort()).toEqual(changes.map((c) => c.key).sort());
    expect(file.sameSubjectBatches).toEqual([]);
    expect(file.overlaps).toEqual([]);
    expect(file.batches.length).toBeGreaterThan(1);
    expect(Math.max(...file.batches.map((b) => b.length))).toBeGreaterThan(1);
    // Fewer sink calls than changes; per subject, feed order.
    expect(file.batches.length + file.attempts.size).toBeLessThan(60);
    for (let s = 0; s < 6; s++) {
      const ids = file.delivered.filter((c) => c.subject_url === `s${s}`).map((c) => c.event_id);
      expect(ids).toEqual([...ids].sort((a, b) => a - b));
    }
    expect(h.finished.filter((e) => e.outcome === 'ok')).toHaveLength(60);
  });

  it('queues each shard in rounds: a batch runs a round long, each subject in feed order', async () => {
    const config = queueConfig(redis.url, { shards: 2, concurrency: 2 });
    const file = new BatchRecordingSink();
    const h = harness(config, { file });
    // Each subject's five changes come together in the feed: in feed order a batch would stop at
    // every second change.
    const changes = range(0, 30).map((i) => makeChange(100 + i, { subject: `s${Math.floor(i / 5)}` }));
    await h.producer.commitPage({ source: 'scheduling', changes, cursor: 129, seenAbove: [] });
    await h.runner.start();
    await waitFor('30 deliveries', () => file.delivered.length >= 30);
    await new Promise((r) => setTimeout(r, 200));
    expect(file.keys().sort()).toEqual(changes.map((c) => c.key).sort());
    expect(file.sameSubjectBatches).toEqual([]);
    // Five rounds per shard that has subjects, each one batch: no change went alone.
    expect(file.batches.flat()).toHaveLength(30);
    expect(file.batches.length).toBeLessThanOrEqual(10);
    for (let s = 0; s < 6; s++) {
      const ids = file.delivered.filter((c) => c.subject_url === `s${s}`).map((c) => c.event_id);
      expect(ids).toEqual(range(100 + 5 * s, 5));
    }
  });

  it('delivers a slice left without its commit count (the front of a transaction Redis replayed), counting nothing out for it', async () => {
    const config = queueConfig(redis.url, { shards: 1 });
    const file = new BatchRecordingSink();
    const h = harness(config, { file });
    const counted = range(1, 4).map((id) => makeChange(id));
    await h.producer.commitPage({ source: 'scheduling', changes: counted, cursor: 4, seenAbove: [] });
    // What a Redis 7.0 that replays the front of a cut transaction leaves: a slice as a commit adds
    // it, without the commit's counting script (valkey-io/valkey#4342).
    const client = new Redis(redis.url);
    cleanups.push(async () => client.disconnect());
    const shard = new Queue(shardQueueName('file', 0), {
      connection: client,
      prefix: bullPrefix(config.prefix),
    });
    cleanups.push(() => shard.close());
    const orphan = range(5, 6).map((id) => makeChange(id));
    await shard.add(UNCOUNTED_SLICE, { changes: orphan }, { jobId: 'orphan' });
    const backlog = `${bullPrefix(config.prefix)}:backlog`;
    expect(await client.hget(backlog, 'file')).toBe('4');
    await h.runner.start();
    await waitFor('6 deliveries', () => file.delivered.length >= 6);
    await waitFor('the backlog back at 0', async () => (await client.hget(backlog, 'file')) === '0');
    await new Promise((r) => setTimeout(r, 300));
    expect(await client.hget(backlog, 'file'), 'the orphan is not counted out').toBe('0');
    expect(file.keys().sort()).toEqual([...counted, ...orphan].map((c) => c.key).sort());
  });

  it('after a failed batch delivers one by one, so only the failing change is retried', async () => {
    const config = queueConfig(redis.url, { shards: 1, attempts: 5, backoff_ms: 10, max_backoff_ms: 20 });
    const file = new BatchRecordingSink({
      failBatch: (batch) => (batch.some((c) => c.event_id === 4) ? retryLater('disk busy') : undefined),
      fail: (c, attempt) => (c.event_id === 4 && attempt <= 2 ? retryLater('disk busy') : undefined),
    });
    const h = harness(config, { file });
    const changes = range(1, 8).map((id) => makeChange(id));
    await h.producer.commitPage({ source: 'scheduling', changes, cursor: 8, seenAbove: [] });
    await h.runner.start();
    await waitFor('8 deliveries', () => file.delivered.length >= 8);
    await new Promise((r) => setTimeout(r, 200));
    expect(file.keys()).toEqual(changes.map((c) => c.key));
    // The batch failure spent no attempt: change 4 failed twice on its own, then went through.
    expect(file.attempts.get('scheduling:4')).toBe(3);
    expect(h.finished.filter((e) => e.outcome === 'retry').map((e) => e.key)).toEqual([
      'scheduling:4',
      'scheduling:4',
    ]);
    expect(h.finished.filter((e) => e.outcome === 'ok')).toHaveLength(8);
    expect(h.finished.filter((e) => e.outcome === 'dead')).toHaveLength(0);
  });

  it('dead-letters only the refused change of a slice; the rest is delivered and dlq retry redelivers it', async () => {
    const config = queueConfig(redis.url, { shards: 1, attempts: 10 });
    let refuse = true;
    const hook = new RecordingSink({
      fail: (c) => (refuse && c.event_id === 3 ? never('HTTP 422: unknown field') : undefined),
    });
    const h = harness(config, { hook });
    const changes = range(1, 6).map((id) => makeChange(id));
    await h.producer.commitPage({ source: 'scheduling', changes, cursor: 6, seenAbove: [] });
    expect(await sliceJobs(config, 'hook')).toHaveLength(1);
    await h.runner.start();
    await waitFor('5 deliveries', () => hook.delivered.length >= 5);
    await waitFor(
      'the slice to complete',
      async () => (await sliceJobs(config, 'hook', ['completed'])).length === 1,
    );
    expect(hook.keys()).toEqual(changes.filter((c) => c.event_id !== 3).map((c) => c.key));
    expect(await sliceJobs(config, 'hook', ['failed'])).toEqual([]);

    const dead = await h.admin.listDead({});
    expect(dead.map((d) => d.key)).toEqual(['scheduling:3']);
    expect(dead[0]).toMatchObject({ sink: 'hook', attempts: 1, change: changes[2] });
    expect(dead[0]!.error).toMatch(/refused.*HTTP 422: unknown field/);
    expect(await h.admin.listDead({ key: 'scheduling:3' })).toHaveLength(1);
    expect(await h.admin.listDead({ key: 'scheduling:2' })).toEqual([]);
    expect((await h.admin.counts()).hook).toEqual({ waiting: 0, active: 0, delayed: 0, failed: 0, dead: 1 });
    expect(h.finished.filter((e) => e.outcome === 'dead').map((e) => e.key)).toEqual(['scheduling:3']);

    refuse = false;
    expect(await h.admin.retryDead({ key: 'scheduling:3' })).toBe(1);
    await waitFor('redelivered', () => hook.keys().includes('scheduling:3'));
    expect(hook.attempts.get('scheduling:3')).toBe(2);
    expect(await h.admin.listDead({})).toEqual([]);
    // A second retry of a delivered change finds nothing (the retried slice got a fresh id).
    expect(await h.admin.retryDead({ key: 'scheduling:3' })).toBe(0);
  });

  it('after cursor set back, the same pages are queued and delivered again (completed jobs are retained)', async () => {
    const config = queueConfig(redis.url, { shards: 2 });
    const hook = new RecordingSink();
    const h = harness(config, { hook });
    const changes = range(1, 6).map((id) => makeChange(id));
    await h.producer.commitPage({ source: 'scheduling', changes, cursor: 6, seenAbove: [] });
    await h.runner.start();
    await waitFor('first delivery', () => hook.delivered.length === 6);
    // `cursor set scheduling 0`, as the command does it (held, fenced, counted as a rewind).
    const client = new Redis(redis.url);
    try {
      const held = await holdSource(client, config.prefix, 'scheduling', 3000, 'test', silentLogger);
      if ('holder' in held) throw new Error(`held by ${held.holder}`);
      await held.save(0, []);
      await held.release();
    } finally {
      client.disconnect();
    }
    await h.producer.commitPage({ source: 'scheduling', changes, cursor: 6, seenAbove: [] });
    await waitFor('delivered again', () => hook.delivered.length === 12);
    for (const c of changes) expect(hook.delivered.filter((d) => d.key === c.key)).toHaveLength(2);
  });

  it('turns the undelivered changes of a slice BullMQ failed itself into dead letters', async () => {
    const config = queueConfig(redis.url, { shards: 1, attempts: 3 });
    const producer = createBullmqProducer({
      queue: config,
      sinks: [{ name: 'hook', filter: ANY }],
      logger: silentLogger,
    });
    const admin = createBullmqAdmin({ queue: config, sinkNames: ['hook'] });
    cleanups.push(
      () => producer.close(),
      () => admin.close(),
    );
    const changes = range(1, 5).map((id) => makeChange(id));
    await producer.commitPage({ source: 'scheduling', changes, cursor: 5, seenAbove: [] });
    // What BullMQ does to a slice stalled more than `attempts` times, two changes in: fail it.
    const connection = new Redis(redis.url, { maxRetriesPerRequest: null });
    const failing = new Worker(
      shardQueueName('hook', 0),
      async (job) => {
        await job.updateProgress({ done: 2, attempts: 0 });
        throw new Error('job stalled more than allowable limit');
      },
      { connection, prefix: bullPrefix(config.prefix) },
    );
    try {
      await waitFor(
        'the slice to fail',
        async () => (await sliceJobs(config, 'hook', ['failed'])).length === 1,
      );
    } finally {
      await failing.close();
      connection.disconnect();
    }
    // status counts its undelivered changes as dead before anyone buried them ...
    expect((await admin.counts()).hook!.dead).toBe(3);
    // ... a starting delivery buries them in the dead queue (they were not delivered) ...
    const hook = new RecordingSink();
    const runner = createBullmqDelivery({
      queue: config,
      sinks: [{ name: 'hook', sink: hook }],
      events: new PipelineEvents(),
      logger: silentLogger,
    });
    cleanups.push(() => runner.stop(2_000));
    await runner.start();
    await waitFor(
      'the failed slice buried',
      async () => (await sliceJobs(config, 'hook', ['failed'])).length === 0,
    );
    expect(hook.delivered).toEqual([]);
    // ... and dlq lists them as dead letters, one per change.
    const dead = await admin.listDead({});
    expect(dead.map((d) => d.key)).toEqual(['scheduling:3', 'scheduling:4', 'scheduling:5']);
    expect(dead[0]!.error).toBe('job stalled more than allowable limit');
    expect(await sliceJobs(config, 'hook', ['failed'])).toEqual([]);
    expect((await admin.counts()).hook!.dead).toBe(3);
  });
});
