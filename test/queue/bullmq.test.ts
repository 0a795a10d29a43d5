// The BullMQ queue driver against the queue-driver conformance suite, on a real redis-server.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll } from 'vitest';
import { startRedis, type RedisServer } from '../support/redis.js';
import { describeQueueDriverConformance } from './conformance.js';
import { driverConfig } from './support.js';

let redis: RedisServer | undefined;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

describeQueueDriverConformance('bullmq', {
  config: (dir, sinks, queue) => {
    if (!redis) throw new Error('redis-server not started');
    // A fresh prefix per config: tests sharing the server never see each other's queues.
    return driverConfig(dir, sinks, {
      driver: 'bullmq',
      redis_url: redis.url,
      prefix: `t-${randomUUID().slice(0, 8)}`,
      ...queue,
    });
  },
  // A slice in flight in a killed worker is taken up again once found stalled (lock 10 s, check 5 s).
  recoveryMs: 20_000,
});
