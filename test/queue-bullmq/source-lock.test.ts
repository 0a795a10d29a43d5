import { Redis } from 'ioredis';
import { pino } from 'pino';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { acquireSourceLock, readSourceLockOwner } from '../../src/queue/bullmq/source-lock.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { silentLogger } from './support.js';

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

let n = 0;
const freshPrefix = (): string => `lock-${process.pid}-${++n}`;

function capturingLogger(lines: string[]) {
  return pino(
    { level: 'info' },
    new Writable({
      write(chunk: Buffer, _enc, cb) {
        lines.push(chunk.toString('utf8'));
        cb();
      },
    }),
  );
}

describe('bullmq source lock', () => {
  it('makes a second acquirer wait until the first releases', async () => {
    const prefix = freshPrefix();
    const base = { redisUrl: redis.url, prefix, source: 'scheduling', ttlMs: 3_000, pollMs: 50 };
    const first = await acquireSourceLock({ ...base, owner: 'host-a:1', logger: silentLogger });
    expect(await inspector.get(`{${prefix}}:source-lock:scheduling`)).toBe('host-a:1');
    expect(await readSourceLockOwner(redis.url, prefix, 'scheduling')).toBe('host-a:1');

    const lines: string[] = [];
    let secondAcquired = false;
    const secondPromise = acquireSourceLock({
      ...base,
      owner: 'host-b:2',
      logger: capturingLogger(lines),
    }).then((l) => {
      secondAcquired = true;
      return l;
    });
    await new Promise((r) => setTimeout(r, 300));
    expect(secondAcquired).toBe(false);
    const waiting = lines.filter((l) => l.includes('waiting for source scheduling held by host-a:1'));
    expect(waiting).toHaveLength(1); // logged once, not once per poll

    await first.release();
    await first.release(); // idempotent
    const second = await secondPromise;
    expect(await readSourceLockOwner(redis.url, prefix, 'scheduling')).toBe('host-b:2');
    expect(second.lost.aborted).toBe(false);
    await second.release();
    expect(await readSourceLockOwner(redis.url, prefix, 'scheduling')).toBeNull();
  });

  it('renews while held, and a crashed holder lets the next one in once the TTL lapses', async () => {
    const prefix = freshPrefix();
    const base = { redisUrl: redis.url, prefix, source: 'workflow', ttlMs: 600, pollMs: 50 };
    const held = await acquireSourceLock({ ...base, owner: 'a', logger: silentLogger });
    await new Promise((r) => setTimeout(r, 1_200)); // two TTLs: only renewal keeps it
    expect(await readSourceLockOwner(redis.url, prefix, 'workflow')).toBe('a');
    expect(held.lost.aborted).toBe(false);

    // Simulate a crashed holder: a key nobody renews.
    await held.release();
    await inspector.set(`{${prefix}}:source-lock:workflow`, 'crashed', 'PX', 600);
    const t0 = Date.now();
    const next = await acquireSourceLock({ ...base, owner: 'b', logger: silentLogger });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(300);
    expect(await readSourceLockOwner(redis.url, prefix, 'workflow')).toBe('b');
    await next.release();
  });

  it("fires `lost` when the key is stolen, and release does not delete the thief's key", async () => {
    const prefix = freshPrefix();
    const key = `{${prefix}}:source-lock:scheduling`;
    const lock = await acquireSourceLock({
      redisUrl: redis.url,
      prefix,
      source: 'scheduling',
      owner: 'me',
      ttlMs: 600,
      logger: silentLogger,
    });
    await inspector.set(key, 'thief', 'PX', 10_000);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('lost did not fire')), 2_000);
      lock.lost.addEventListener('abort', () => {
        clearTimeout(timer);
        resolve();
      });
    });
    await lock.release();
    expect(await inspector.get(key)).toBe('thief');
  });

  it('fires `lost` when Redis stays unreachable for longer than the TTL', async () => {
    const own = await startRedis();
    try {
      const lock = await acquireSourceLock({
        redisUrl: own.url,
        prefix: freshPrefix(),
        source: 's',
        owner: 'me',
        ttlMs: 600,
        logger: silentLogger,
      });
      own.kill();
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('lost did not fire')), 3_000);
        lock.lost.addEventListener('abort', () => {
          clearTimeout(timer);
          resolve();
        });
      });
      await lock.release();
    } finally {
      await own.stop();
    }
  });

  it('stops waiting when the signal aborts', async () => {
    const prefix = freshPrefix();
    const base = { redisUrl: redis.url, prefix, source: 'scheduling', ttlMs: 3_000, pollMs: 50 };
    const first = await acquireSourceLock({ ...base, owner: 'a', logger: silentLogger });
    const controller = new AbortController();
    const waiting = acquireSourceLock({
      ...base,
      owner: 'b',
      logger: silentLogger,
      signal: controller.signal,
    });
    setTimeout(() => controller.abort(), 200);
    await expect(waiting).rejects.toThrow(/gave up waiting for the lock of source scheduling/);
    await first.release();
  });
});
