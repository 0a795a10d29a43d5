import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PipelineEvents } from '../../src/pipeline/events.js';
import { createBullmqDelivery } from '../../src/queue/bullmq/delivery.js';
import { createBullmqProducer } from '../../src/queue/bullmq/producer.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { ANY, RecordingSink, makeChange, queueConfig, range, silentLogger, waitFor } from './support.js';

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
    const runner = createBullmqDelivery({
      queue: config,
      sinks: [{ name: 'file', sink }],
      events: new PipelineEvents(),
      logger: silentLogger,
    });
    const producer = createBullmqProducer({
      queue: config,
      sinks: [{ name: 'file', filter: ANY }],
      saveCursor: () => undefined,
      logger: silentLogger,
    });
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
});
