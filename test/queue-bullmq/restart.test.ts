import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bullPrefix, shardQueueName } from '../../src/queue/bullmq/names.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import {
  RecordingSink,
  deliveryFor,
  makeChange,
  producerFor,
  queueConfig,
  range,
  waitFor,
} from './support.js';

let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedis({ appendonly: true });
});
afterAll(async () => {
  await redis.stop();
});

describe('bullmq with a Redis restart', () => {
  it('delivers everything after Redis restarts mid-delivery (appendonly): nothing lost', async () => {
    const config = queueConfig(redis.url, {
      shards: 2,
      concurrency: 2,
      backoff_ms: 20,
      max_backoff_ms: 200,
      attempts: 1_000,
    });
    const sink = new RecordingSink({ latencyMs: () => 10 });
    const runner = deliveryFor(config, 'file', sink);
    const producer = producerFor(config, 'file');
    const changes = range(1, 200).map((id) => makeChange(id, { subject: `s${id % 7}` }));
    try {
      await producer.commitPage({ source: 'scheduling', changes, cursor: 200, seenAbove: [] });
      await runner.start();
      await waitFor('some deliveries', () => sink.delivered.length >= 20);
      expect(sink.delivered.length).toBeLessThan(200);
      await redis.restart();
      // A page queued right after the restart must also make it.
      const more = range(201, 20).map((id) => makeChange(id, { subject: `s${id % 7}` }));
      await waitFor(
        'producer accepts pages again',
        async () => {
          try {
            await producer.commitPage({ source: 'scheduling', changes: more, cursor: 220, seenAbove: [] });
            return true;
          } catch {
            return false;
          }
        },
        15_000,
      );
      const expected = [...changes, ...more].map((c) => c.key).sort();
      await waitFor('every change delivered', () => new Set(sink.keys()).size >= expected.length, 45_000);
      expect([...new Set(sink.keys())].sort()).toEqual(expected);
    } finally {
      await producer.close();
      await runner.stop(5_000);
    }
  });

  it('a slice taken again after a crash resumes from its recorded progress, not from its start', async () => {
    const config = queueConfig(redis.url, { shards: 1 });
    const producer = producerFor(config, 'file');
    const changes = range(1, 6).map((id) => makeChange(id));
    const connection = new Redis(redis.url);
    const queue = new Queue(shardQueueName('file', 0), { connection, prefix: bullPrefix(config.prefix) });
    const sink = new RecordingSink();
    const runner = deliveryFor(config, 'file', sink);
    try {
      await producer.commitPage({ source: 'scheduling', changes, cursor: 6, seenAbove: [] });
      // What a worker killed after a failure of change 3 (index 2) leaves behind.
      const [job] = await queue.getJobs(['wait']);
      await job!.updateProgress({ done: 2, attempts: 1 });
      await runner.start();
      await waitFor('the rest delivered', () => sink.delivered.length >= 4);
      await new Promise((r) => setTimeout(r, 200));
      expect(sink.keys()).toEqual(changes.slice(2).map((c) => c.key));
    } finally {
      await runner.stop(2_000);
      await producer.close();
      await queue.close();
      connection.disconnect();
    }
  });
});
