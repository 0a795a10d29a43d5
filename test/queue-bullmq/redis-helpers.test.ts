import { Redis } from 'ioredis';
import { pino, type Logger } from 'pino';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  fnv1a,
  jobIdForKey,
  keyForJobId,
  shardOf,
  shardQueueName,
  commitStatsKey,
  leaseKey,
  leaseTokenKey,
  pollersKey,
  sourceStateKey,
} from '../../src/queue/bullmq/names.js';
import { createBullmqProducer } from '../../src/queue/bullmq/producer.js';
import { closeRedis, createRedisConnection, redactRedisUrl } from '../../src/queue/bullmq/redis.js';
import {
  assertRedisPersists,
  checkRedisPolicy,
  readRedisPersistence,
  redisAllowsInfo,
} from '../../src/queue/bullmq/redis-preflight.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { ANY, makeChange, queueConfig, silentLogger } from './support.js';

let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis.stop();
});

function capture(): { lines: string[]; logger: Logger } {
  const lines: string[] = [];
  const logger = pino(
    { level: 'debug' },
    new Writable({
      write(chunk: Buffer, _enc, cb) {
        lines.push(chunk.toString('utf8'));
        cb();
      },
    }),
  );
  return { lines, logger };
}

describe('redis helpers', () => {
  it('strips user info from URLs', () => {
    expect(redactRedisUrl('redis://user:s3cret@10.0.0.1:6380/2')).toBe('redis://10.0.0.1:6380/2');
    expect(redactRedisUrl('rediss://:s3cret@cache.internal:6379')).toBe('rediss://cache.internal:6379');
    expect(redactRedisUrl('not a url s3cret')).not.toContain('s3cret');
  });

  it('rejects a non-redis URL with an error naming the key and never the password', () => {
    expect(() => createRedisConnection('http://u:s3cret@127.0.0.1:1', 'admin', silentLogger)).toThrow(
      /queue\.redis_url: expected redis:\/\/ or rediss:\/\//,
    );
    try {
      createRedisConnection('http://u:s3cret@127.0.0.1:1', 'admin', silentLogger);
    } catch (err) {
      expect(String(err)).not.toContain('s3cret');
    }
  });

  it('requires queue.redis_url for the bullmq producer', () => {
    const config = { ...queueConfig(redis.url), redis_url: undefined };
    expect(() => createBullmqProducer({ queue: config, sinks: [], logger: silentLogger })).toThrow(
      /queue\.redis_url: required/,
    );
  });

  it('rejects a sink name BullMQ cannot use as a queue name', () => {
    expect(() =>
      createBullmqProducer({
        queue: queueConfig(redis.url),
        sinks: [{ name: 'bad:name', filter: ANY }],

        logger: silentLogger,
      }),
    ).toThrow(/sink "bad:name"/);
  });

  it('warns when maxmemory-policy is not noeviction, and not when it is', async () => {
    const admin = new Redis(redis.url);
    try {
      const quiet = capture();
      expect(await checkRedisPolicy(redis.url, quiet.logger)).toBe('noeviction');
      expect(quiet.lines.filter((l) => l.includes('"level":40'))).toEqual([]);

      await admin.config('SET', 'maxmemory-policy', 'allkeys-lru');
      const loud = capture();
      expect(await checkRedisPolicy(redis.url, loud.logger)).toBe('allkeys-lru');
      expect(loud.lines.some((l) => l.includes('"level":40') && l.includes('allkeys-lru'))).toBe(true);
    } finally {
      await admin.config('SET', 'maxmemory-policy', 'noeviction');
      admin.disconnect();
    }
  });

  it('never logs the password of the redis url on connection errors', async () => {
    const down = await startRedis();
    await down.stop();
    const { lines, logger } = capture();
    const client = createRedisConnection(`redis://user:s3cret@127.0.0.1:${down.port}`, 'producer', logger);
    await new Promise((r) => setTimeout(r, 300));
    await closeRedis(client);
    expect(lines.some((l) => l.includes('redis connection error'))).toBe(true);
    expect(lines.join('')).not.toContain('s3cret');
  });
});

describe('queue naming', () => {
  it('hashes with 32-bit FNV-1a (reference vectors) and shards by subject, falling back to key', () => {
    expect(fnv1a('')).toBe(0x811c9dc5);
    expect(fnv1a('a')).toBe(0xe40c292c);
    expect(fnv1a('foobar')).toBe(0xbf9cf968);
    const a = makeChange(1, { subject: 'http://x/api/titles/42' });
    const b = makeChange(2, { subject: 'http://x/api/titles/42' });
    expect(shardOf(a, 16)).toBe(shardOf(b, 16));
    expect(shardOf(a, 16)).toBe(fnv1a('http://x/api/titles/42') % 16);
    const noSubject = { ...makeChange(3), subject_url: null };
    expect(shardOf(noSubject, 16)).toBe(fnv1a('scheduling:3') % 16);
    expect(shardOf(a, 1)).toBe(0);
  });

  it('encodes keys as BullMQ job ids and back', () => {
    expect(jobIdForKey('scheduling:123457')).toBe('scheduling~123457');
    expect(keyForJobId('scheduling~123457')).toBe('scheduling:123457');
    expect(shardQueueName('hook', 3)).toBe('hook.3');
    // Scaled mode's own keys share the queues' hash tag (one Redis Cluster slot).
    expect(leaseKey('feedsync', 'workflow')).toBe('{feedsync}:lease:workflow');
    expect(leaseTokenKey('feedsync', 'workflow')).toBe('{feedsync}:lease-token:workflow');
    expect(sourceStateKey('feedsync', 'workflow')).toBe('{feedsync}:source:workflow');
    expect(pollersKey('feedsync')).toBe('{feedsync}:pollers');
    expect(commitStatsKey('{feedsync}')).toBe('{feedsync}:commit-stats');
  });

  it('tells a persisting Redis (AOF or RDB save points) from a volatile one, and refuses the latter', async () => {
    const aof = await startRedis({ appendonly: true, snapshots: false });
    const volatile = await startRedis({ snapshots: false });
    try {
      expect(await readRedisPersistence(redis.url, silentLogger)).toMatchObject({ persists: true });
      expect(await readRedisPersistence(aof.url, silentLogger)).toEqual({
        persists: true,
        detail: 'CONFIG: appendonly yes, save ""',
      });
      expect(await readRedisPersistence(volatile.url, silentLogger)).toEqual({
        persists: false,
        detail: 'CONFIG: appendonly no, save ""',
      });
      await expect(assertRedisPersists(volatile.url, false, silentLogger)).rejects.toThrow(
        /does not persist its data.*appendonly yes.*queue\.allow_volatile_redis: true/s,
      );
      await expect(assertRedisPersists(volatile.url, true, silentLogger)).resolves.toBeUndefined();
      await expect(assertRedisPersists(aof.url, false, silentLogger)).resolves.toBeUndefined();
      // Unreachable: not knowing is a refusal too, without the password in the message.
      await volatile.stop();
      const withPassword = volatile.url.replace('redis://', 'redis://:hunter2@');
      const refusal = assertRedisPersists(withPassword, true, silentLogger);
      await expect(refusal).rejects.toThrow(
        /^cannot check that Redis at redis:\/\/127\.0\.0\.1:\d+\/? persists its data: /,
      );
      await expect(refusal).rejects.not.toThrow(/hunter2/);
    } finally {
      await Promise.all([aof.stop(), volatile.stop()]);
    }
  });

  it('judges persistence from INFO when CONFIG is forbidden (managed Redis)', async () => {
    const managed = await startRedis({ snapshots: false });
    const client = new Redis(managed.url);
    try {
      // Managed services rename or disable CONFIG; an ACL user without it behaves the same.
      await client.acl('SETUSER', 'app', 'on', '>pw', '~*', '&*', '+@all', '-config');
      const url = `redis://app:pw@127.0.0.1:${managed.port}`;
      expect(await readRedisPersistence(url, silentLogger)).toEqual({
        persists: false,
        detail: 'INFO persistence: aof_enabled 0, rdb_saves 0',
      });
      await client.config('SET', 'appendonly', 'yes');
      expect(await readRedisPersistence(url, silentLogger)).toMatchObject({ persists: true });
    } finally {
      client.disconnect();
      await managed.stop();
    }
  });

  it('cannot tell without CONFIG GET and INFO, and then warns instead of refusing to start', async () => {
    const client = new Redis(redis.url);
    try {
      await client.acl('SETUSER', 'blind', 'on', '>pw', '~*', '&*', '+@all', '-config', '-info');
      const url = `redis://blind:pw@127.0.0.1:${redis.port}`;
      // As the driver passes it once it knows INFO is refused (no ioredis ready check).
      const endpoint = { url, infoRefused: true };
      expect(await readRedisPersistence(endpoint, silentLogger)).toEqual({
        persists: undefined,
        detail: 'this Redis user may run neither CONFIG GET nor INFO',
      });
      const loud = capture();
      await expect(assertRedisPersists(endpoint, false, loud.logger)).resolves.toBeUndefined();
      const warned = loud.lines.filter((l) => l.includes('"level":40'));
      expect(warned).toHaveLength(1);
      expect(warned[0]).toMatch(
        /cannot tell whether Redis persists its data.*queue\.allow_volatile_redis: true/,
      );
      // Said to be fine: no warning.
      const quiet = capture();
      await assertRedisPersists(endpoint, true, quiet.logger);
      expect(quiet.lines.filter((l) => l.includes('"level":40'))).toEqual([]);
      // And INFO refused is detected (the driver then turns BullMQ's and ioredis' INFO checks off).
      expect(await redisAllowsInfo(url, silentLogger)).toBe(false);
      expect(await redisAllowsInfo(redis.url, silentLogger)).toBe(true);
    } finally {
      await client.acl('DELUSER', 'blind');
      client.disconnect();
    }
  });
});
