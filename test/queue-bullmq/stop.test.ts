import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBullmqAdmin } from '../../src/queue/bullmq/admin.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import {
  RecordingSink,
  deliveryFor,
  makeChange,
  producerFor,
  queueConfig,
  range,
  sliceJobs,
  waitFor,
} from './support.js';

let redis: RedisServer;
let inspector: Redis;
beforeAll(async () => {
  redis = await startRedis();
  inspector = new Redis(redis.url);
});
afterAll(async () => {
  inspector.disconnect();
  await redis.stop();
});

/** Connected clients other than the inspector itself. */
async function clientCount(): Promise<number> {
  const list = (await inspector.client('LIST')) as string;
  return list.trim().split('\n').length - 1;
}

describe('bullmq delivery stop()', () => {
  it('resolves within the timeout with a slow in-flight sink, hands the change back and closes every connection', async () => {
    const config = queueConfig(redis.url, { shards: 2, concurrency: 2 });
    const baseline = await clientCount();
    let started = 0;
    const sink = new RecordingSink({
      latencyMs: () => {
        started++;
        return 4_000;
      },
    });
    const runner = deliveryFor(config, 'slow', sink);
    const producer = producerFor(config, 'slow');
    const changes = range(1, 6).map((id) => makeChange(id));
    await producer.commitPage({ source: 'scheduling', changes, cursor: 6, seenAbove: [] });
    await producer.close();
    await runner.start();
    await waitFor('deliveries in flight', () => started >= 1);
    expect(await clientCount()).toBeGreaterThan(baseline);

    const t0 = Date.now();
    await runner.stop(1_500);
    const took = Date.now() - t0;
    expect(took).toBeLessThan(2_500);
    await runner.stop(1_500); // idempotent
    await waitFor('connections closed', async () => (await clientCount()) === baseline, 3_000);

    // The in-flight slices were handed back, not lost and not dead: all 6 changes still wait.
    const waiting = await sliceJobs(config, 'slow', ['wait']);
    expect(waiting.flatMap((j) => j.changes.map((c) => c.key)).sort()).toEqual(
      changes.map((c) => c.key).sort(),
    );
    const admin = createBullmqAdmin({ queue: config, sinkNames: ['slow'] });
    try {
      const counts = (await admin.counts()).slow!;
      expect(counts.dead).toBe(0);
      // Counted in changes, like the local queue: all 6 of the handed-back slices.
      expect(counts.waiting).toBe(waiting.flatMap((j) => j.changes).length);
      expect(counts.active).toBe(0);
    } finally {
      await admin.close();
    }
    expect(sink.delivered).toEqual([]);
  });

  it('a stop mid-slice hands back the rest with its progress; the next runner resumes there', async () => {
    const config = queueConfig(redis.url, { shards: 1, concurrency: 1 });
    const first = new RecordingSink({ latencyMs: () => 100 });
    const runner = deliveryFor(config, 'file', first);
    const producer = producerFor(config, 'file');
    const changes = range(1, 10).map((id) => makeChange(id));
    try {
      await producer.commitPage({ source: 'scheduling', changes, cursor: 10, seenAbove: [] });
      await runner.start();
      await waitFor('3 deliveries', () => first.delivered.length >= 3);
      await runner.stop(5_000);
      const done = first.delivered.length;
      expect(done).toBeLessThan(10);
      expect(first.keys()).toEqual(changes.slice(0, done).map((c) => c.key));
      const [slice] = await sliceJobs(config, 'file', ['wait']);
      expect(slice!.progress).toEqual({ done, attempts: 0 });

      const second = new RecordingSink();
      const next = deliveryFor(config, 'file', second);
      await next.start();
      await waitFor('the rest delivered', () => second.delivered.length >= 10 - done);
      await next.stop(2_000);
      expect(second.keys()).toEqual(changes.slice(done).map((c) => c.key));
    } finally {
      await producer.close();
    }
  });

  it('stop() before start() resolves at once', async () => {
    const runner = deliveryFor(queueConfig(redis.url), 'x', new RecordingSink());
    await runner.stop(1_000);
    await runner.start(); // no-op after stop
  });

  it('stop() resolves within its timeout while start() still waits for an unreachable Redis', async () => {
    const down = await startRedis();
    down.kill();
    try {
      const runner = deliveryFor(queueConfig(down.url), 'x', new RecordingSink());
      const starting = runner.start();
      await new Promise((r) => setTimeout(r, 200));
      const t0 = Date.now();
      await runner.stop(1_000);
      expect(Date.now() - t0).toBeLessThan(2_500);
      // start() does not hang its caller either: it resolves, with nothing left to start.
      await starting;
    } finally {
      await down.stop();
    }
  });

  it('starts delivering once Redis comes up after start()', async () => {
    const late = await startRedis();
    late.kill();
    const config = queueConfig(late.url);
    const sink = new RecordingSink();
    const runner = deliveryFor(config, 'x', sink);
    try {
      const starting = runner.start();
      await new Promise((r) => setTimeout(r, 300));
      await late.restart();
      await starting;
      const producer = producerFor(config, 'x');
      await producer.commitPage({ source: 'scheduling', changes: [makeChange(1)], cursor: 1, seenAbove: [] });
      await producer.close();
      await waitFor('delivery after late start', () => sink.delivered.length === 1, 15_000);
    } finally {
      await runner.stop(2_000);
      await late.stop();
    }
  });

  it('lets a quick in-flight delivery finish during a graceful stop', async () => {
    const config = queueConfig(redis.url, { shards: 1, concurrency: 1 });
    const sink = new RecordingSink({ latencyMs: () => 300 });
    const runner = deliveryFor(config, 'file', sink);
    const producer = producerFor(config, 'file');
    await producer.commitPage({
      source: 'scheduling',
      changes: [makeChange(1), makeChange(2)],
      cursor: 2,
      seenAbove: [],
    });
    await runner.start();
    await waitFor('first delivery in flight', () => sink.attempts.size >= 1);
    await runner.stop(5_000);
    expect(sink.keys()).toEqual(['scheduling:1']);
    const admin = createBullmqAdmin({ queue: config, sinkNames: ['file'] });
    try {
      expect((await admin.counts()).file).toMatchObject({ waiting: 1, active: 0, dead: 0 });
    } finally {
      await admin.close();
      await producer.close();
    }
  });
});
