// queue.min_replicas_acked: a page commit counts only once a replica acknowledged it (WAIT).
// A real primary and replica (two redis-server processes, REPLICAOF); the replica is killed and
// brought back mid-test.
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sourceStateKey } from '../../src/queue/bullmq/names.js';
import { createBullmqProducer } from '../../src/queue/bullmq/producer.js';
import { assertRedisPersists } from '../../src/queue/bullmq/redis-preflight.js';
import { holdSource } from '../../src/queue/bullmq/source-hold.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { ANY, makeChange, queueConfig, silentLogger } from './support.js';

let primary: RedisServer;
let replica: RedisServer;

async function follow(): Promise<void> {
  const client = new Redis(replica.url);
  try {
    await client.replicaof('127.0.0.1', primary.port);
  } finally {
    client.disconnect();
  }
  const p = new Redis(primary.url);
  try {
    const deadline = Date.now() + 10_000;
    while (!/^slave0:.*state=online/m.test(await p.info('replication'))) {
      if (Date.now() > deadline) throw new Error('replica never came online');
      await new Promise((r) => setTimeout(r, 50));
    }
  } finally {
    p.disconnect();
  }
}

beforeAll(async () => {
  // Neither persists to disk: replication is the durability here.
  primary = await startRedis({ snapshots: false });
  replica = await startRedis({ snapshots: false });
  await follow();
}, 30_000);
afterAll(async () => {
  await replica?.stop();
  await primary?.stop();
});

describe('queue.min_replicas_acked', () => {
  it('accepts a primary with enough replicas instead of AOF at start-up, and refuses one without', async () => {
    await expect(assertRedisPersists(primary.url, false, silentLogger, 0)).rejects.toThrow(
      /does not persist its data/,
    );
    await expect(assertRedisPersists(primary.url, false, silentLogger, 1)).resolves.toBeUndefined();
    await expect(assertRedisPersists(primary.url, false, silentLogger, 2)).rejects.toThrow(
      /1 replica\(s\) online, queue.min_replicas_acked 2/,
    );
  });

  it('commits while a replica acknowledges, fails clearly without one, and recovers when it is back', async () => {
    const config = queueConfig(primary.url, { min_replicas_acked: 1 });
    const producer = createBullmqProducer({
      queue: config,
      sinks: [{ name: 'out', filter: ANY }],
      logger: silentLogger,
    });
    const check = new Redis(primary.url);
    const cursorOf = async () => check.hget(sourceStateKey(config.prefix, 'scheduling'), 'cursor');
    try {
      const page = (from: number) => [1, 2, 3].map((i) => makeChange(from + i, { subject: `s${from + i}` }));
      await expect(
        producer.commitPage({ source: 'scheduling', changes: page(0), cursor: 3, seenAbove: [] }),
      ).resolves.toEqual({ out: 3 });
      expect(await cursorOf()).toBe('3');

      replica.kill();
      const started = Date.now();
      const failed = producer.commitPage({
        source: 'scheduling',
        changes: page(3),
        cursor: 6,
        seenAbove: [],
      });
      await expect(failed).rejects.toThrow(
        /not durable: 0 of the 1 replica\(s\) required by queue.min_replicas_acked/,
      );
      expect(Date.now() - started).toBeGreaterThanOrEqual(1_900);
      // The retry finds the cursor on the primary ('already') but still may not report it committed.
      await expect(
        producer.commitPage({ source: 'scheduling', changes: page(3), cursor: 6, seenAbove: [] }),
      ).rejects.toThrow(/not durable/);

      await replica.restart();
      await follow();
      await expect(
        producer.commitPage({ source: 'scheduling', changes: page(3), cursor: 6, seenAbove: [] }),
      ).resolves.toBeDefined();
      await expect(
        producer.commitPage({ source: 'scheduling', changes: page(6), cursor: 9, seenAbove: [] }),
      ).resolves.toEqual({ out: 3 });
      expect(await cursorOf()).toBe('9');
      // The replica holds it too.
      const r = new Redis(replica.url);
      try {
        const deadline = Date.now() + 5_000;
        while ((await r.hget(sourceStateKey(config.prefix, 'scheduling'), 'cursor')) !== '9') {
          if (Date.now() > deadline) throw new Error('replica never got cursor 9');
          await new Promise((res) => setTimeout(res, 50));
        }
      } finally {
        r.disconnect();
      }
    } finally {
      check.disconnect();
      await producer.close();
    }
  }, 60_000);

  it('makes `cursor set` (the fenced save of a held source) wait for the replicas too', async () => {
    const client = new Redis(primary.url);
    const prefix = `t-hold-${Date.now()}`;
    try {
      const held = await holdSource(client, prefix, 'scheduling', 15_000, 'test', silentLogger, 1);
      if (!('save' in held)) throw new Error(`not held: ${held.holder}`);
      await expect(held.save(42, [])).resolves.toBeUndefined();
      replica.kill();
      await expect(held.save(43, [])).rejects.toThrow(/new cursor of "scheduling" is not durable/);
      await replica.restart();
      await follow();
      await expect(held.save(43, [])).resolves.toBeUndefined();
      await held.release();
    } finally {
      client.disconnect();
    }
  }, 30_000);
});
