// The admin API contract on the BullMQ queue, on a real redis-server.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll } from 'vitest';
import { startRedis, type RedisServer } from '../support/redis.js';
import { describeAdminApi } from './api-contract.js';

let redis: RedisServer | undefined;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

describeAdminApi('bullmq', {
  queue: () => {
    if (!redis) throw new Error('redis-server not started');
    return { driver: 'bullmq', redis_url: redis.url, prefix: `t-${randomUUID().slice(0, 8)}` };
  },
});
