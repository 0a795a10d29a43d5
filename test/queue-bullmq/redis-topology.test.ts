// The form of queue.redis_url must match the server: a cluster node behind a plain URL, or a
// redis+cluster:// URL on a standalone server, stops start-up naming the form to use (before,
// the first answered MOVED for most keys and the second retried a slot map for ever).
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  assertRedisTopology,
  checkRedisPolicy,
  readRedisPersistence,
  redisAllowsInfo,
} from '../../src/queue/bullmq/redis-preflight.js';
import { classifyRedisError } from '../../src/queue/bullmq/redis-errors.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { startRedisCluster, type RedisClusterSet } from '../support/redis-cluster.js';

const logger = pino({ level: 'silent' });
const PW = 'topology-pw';

describe('start-up check of the Redis topology', () => {
  let standalone: RedisServer;
  let cluster: RedisClusterSet;

  beforeAll(async () => {
    [standalone, cluster] = await Promise.all([startRedis(), startRedisCluster({ password: PW })]);
  }, 60_000);
  afterAll(async () => {
    await Promise.all([standalone?.stop(), cluster?.stop()]);
  });

  it('accepts a form that matches the server', async () => {
    await expect(assertRedisTopology({ url: standalone.url }, logger)).resolves.toBeUndefined();
    await expect(assertRedisTopology({ url: cluster.url }, logger)).resolves.toBeUndefined();
  });

  it('refuses redis+cluster:// on a standalone server, naming redis://', async () => {
    const url = `redis+cluster://127.0.0.1:${standalone.port}`;
    await expect(assertRedisTopology({ url }, logger)).rejects.toThrow(
      /queue\.redis_url: redis\+cluster:\/\/127\.0\.0\.1:\d+ is not a Redis Cluster .*name it with redis:\/\//,
    );
  });

  it('refuses a plain URL on a cluster node, naming redis+cluster://, without showing the password', async () => {
    const port = cluster.ports[0]!;
    const err = await assertRedisTopology({ url: `redis://:${PW}@127.0.0.1:${port}` }, logger).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toMatch(/is a Redis Cluster node: name the cluster with redis\+cluster:\/\//);
    expect(err?.message).not.toContain(PW);
  });

  it('a cluster no node of which answers: the one-off checks give up within seconds instead of waiting for a slot map for ever', async () => {
    const gone = await startRedis();
    await gone.stop();
    const url = `redis+cluster://127.0.0.1:${gone.port}`;
    const started = Date.now();
    await expect(redisAllowsInfo({ url }, logger)).resolves.toBe(true);
    await expect(checkRedisPolicy({ url }, logger)).resolves.toBeUndefined();
    await expect(readRedisPersistence({ url }, logger)).rejects.toThrow(
      /cannot reach the Redis Cluster at redis\+cluster:\/\/127\.0\.0\.1:\d+ \(no slot map within 5000 ms\)/,
    );
    expect(Date.now() - started).toBeLessThan(20_000);
    // ioredis' "Failed to refresh slots cache." is counted as unreachable, like the node's own error.
    expect(classifyRedisError(new Error('Failed to refresh slots cache.'))).toBe('unreachable');
    expect(
      classifyRedisError(
        Object.assign(new Error('Failed to refresh slots cache.'), {
          lastNodeError: new Error('WRONGPASS invalid username-password pair'),
        }),
      ),
    ).toBe('wrongpass');
  }, 30_000);
});
