// Source leases of scaled mode (src/queue/bullmq/lease.ts): one holder per source, a fencing token
// per acquisition that page commits check, renewal, loss, and spreading sources over replicas.
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createRedisSourceLeases,
  readLeaseHolder,
  type RedisSourceLeases,
} from '../../src/queue/bullmq/lease.js';
import { LeaseFencedError } from '../../src/queue/bullmq/page-commit.js';
import { createBullmqProducer } from '../../src/queue/bullmq/producer.js';
import { holdSource } from '../../src/queue/bullmq/source-hold.js';
import type { HeldLease } from '../../src/queue/driver.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { ANY, makeChange, queueConfig, silentLogger, sliceJobs } from './support.js';

let redis: RedisServer;
let inspector: Redis;
const cleanups: (() => Promise<unknown>)[] = [];
beforeAll(async () => {
  redis = await startRedis();
  inspector = new Redis(redis.url);
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
afterAll(async () => {
  inspector.disconnect();
  await redis.stop();
});

let n = 0;
const freshPrefix = (): string => `lease-${process.pid}-${++n}`;
const never = new AbortController().signal;

function leasesFor(
  prefix: string,
  owner: string,
  opts: { sources?: string[]; ttlMs?: number; redisUrl?: string } = {},
): RedisSourceLeases {
  const leases = createRedisSourceLeases({
    redisUrl: opts.redisUrl ?? redis.url,
    prefix,
    sources: opts.sources ?? ['scheduling', 'workflow'],
    ttlMs: opts.ttlMs ?? 3_000,
    owner,
    logger: silentLogger,
  });
  cleanups.push(() => leases.close());
  return leases;
}

function lostWithin(lock: HeldLease, ms: number): Promise<void> {
  if (lock.lost.aborted) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`lost did not fire within ${ms} ms`)), ms);
    lock.lost.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

describe('bullmq source leases', () => {
  it('makes a second replica wait, naming the holder once, until the first releases', async () => {
    const prefix = freshPrefix();
    const a = leasesFor(prefix, 'host-a:1');
    const b = leasesFor(prefix, 'host-b:2');
    const first = (await a.acquire('scheduling', never, () => undefined))!;
    const firstToken = a.fence('scheduling')!.token;
    expect(await inspector.get(`{${prefix}}:lease:scheduling`)).toBe(`${firstToken} host-a:1`);
    expect(await b.holder('scheduling')).toBe('host-a:1');
    expect(await readLeaseHolder(inspector, prefix, 'scheduling')).toBe('host-a:1');

    const waits: string[] = [];
    let acquired = false;
    const second = b
      .acquire('scheduling', never, (holder) => waits.push(holder))
      .then((l) => {
        acquired = true;
        return l;
      });
    await new Promise((r) => setTimeout(r, 1_000));
    expect(acquired).toBe(false);
    expect(waits).toEqual(['host-a:1']); // once, not once per retry

    await first.release();
    await first.release(); // idempotent
    const lock = (await second)!;
    expect(await b.holder('scheduling')).toBe('host-b:2');
    // A new acquisition, a new (larger) fencing token.
    expect(b.fence('scheduling')?.token).toBeGreaterThan(firstToken);
    expect(a.fence('scheduling')).toBeUndefined();
    await lock.release();
    expect(await b.holder('scheduling')).toBeUndefined();
  });

  it('renews while held; a holder that stops renewing (crashed) lets the next one in after the TTL', async () => {
    const prefix = freshPrefix();
    const crashed = leasesFor(prefix, 'crashed', { ttlMs: 1_000 });
    const held = (await crashed.acquire('workflow', never, () => undefined))!;
    const crashedToken = crashed.fence('workflow')!.token;
    await new Promise((r) => setTimeout(r, 2_200)); // two TTLs: only renewal keeps it
    expect(await crashed.holder('workflow')).toBe('crashed');
    expect(held.lost.aborted).toBe(false);
    // Stop its renewals the way a kill -9 would (no release): make its lease key another holder's,
    // with a newer token (an older one would be Redis showing a lease from before it again, which
    // the holder restores over).
    await inspector.set(`{${prefix}}:lease:workflow`, `${crashedToken + 1} crashed-for-good`, 'PX', 1_000);
    const next = leasesFor(prefix, 'next', { ttlMs: 1_000 });
    const t0 = Date.now();
    const lock = (await next.acquire('workflow', never, () => undefined))!;
    expect(Date.now() - t0).toBeGreaterThanOrEqual(500);
    expect(await next.holder('workflow')).toBe('next');
    expect(next.fence('workflow')!.token).toBeGreaterThan(crashedToken);
    await lostWithin(held, 2_000); // the old holder's renewal found a foreign value
    await lock.release();
  });

  it('fences page commits: an old holder whose lease was taken writes neither jobs nor cursor', async () => {
    const config = queueConfig(redis.url);
    // Three sources: with two replicas each may hold two, so `b` can hold `other` beforehand.
    const sources = ['scheduling', 'workflow', 'other'];
    const a = leasesFor(config.prefix, 'old', { ttlMs: 15_000, sources });
    const b = leasesFor(config.prefix, 'new', { ttlMs: 15_000, sources });
    const producerOf = (leases: RedisSourceLeases) => {
      const p = createBullmqProducer({
        queue: config,
        sinks: [{ name: 'file', filter: ANY }],
        leases,
        logger: silentLogger,
      });
      cleanups.push(() => p.close());
      return p;
    };
    const oldProducer = producerOf(a);
    const newProducer = producerOf(b);
    const oldLock = (await a.acquire('scheduling', never, () => undefined))!;
    await oldProducer.commitPage({
      source: 'scheduling',
      changes: [makeChange(1)],
      cursor: 1,
      seenAbove: [],
    });

    // `b` has registered with its first acquire, so it counts two members: its share is two.
    await b.acquire('other', never, () => undefined);
    // Just after the old holder renewed (its key's TTL reset), its next renewal is a second away:
    // the steps below run before it can notice anything.
    const key = `{${config.prefix}}:lease:scheduling`;
    for (let last = await inspector.pttl(key); ;) {
      const now = await inspector.pttl(key);
      if (now > last) break;
      last = now;
      await new Promise((r) => setTimeout(r, 5));
    }
    // The old holder is paused past its TTL (simulated: its key expires) and another replica takes it.
    await inspector.del(key);
    await b.acquire('scheduling', never, () => undefined);
    await newProducer.commitPage({
      source: 'scheduling',
      changes: [makeChange(2)],
      cursor: 2,
      seenAbove: [],
    });

    // The old one wakes up before its renewal noticed: it still believes it holds the lease.
    expect(a.fence('scheduling')).toBeDefined();
    await expect(
      oldProducer.commitPage({ source: 'scheduling', changes: [makeChange(3)], cursor: 3, seenAbove: [] }),
    ).rejects.toThrow(LeaseFencedError);
    expect(oldLock.lost.aborted).toBe(true);
    expect(await inspector.hget(`{${config.prefix}}:source:scheduling`, 'cursor')).toBe('2');
    const ids = (await sliceJobs(config, 'file')).flatMap((j) => j.changes.map((c) => c.event_id));
    expect(ids.sort()).toEqual([1, 2]);
    expect(await inspector.hgetall(`{${config.prefix}}:commit-stats`)).toEqual({
      pages: '2',
      slices: '2',
      changes: '2',
    });
    // And a producer with leases never commits for a source it does not hold.
    await expect(
      oldProducer.commitPage({ source: 'workflow', changes: [makeChange(4)], cursor: 4, seenAbove: [] }),
    ).rejects.toThrow(/does not hold the lease/);
  });

  it('spreads sources: a replica holding more than ceil(sources / replicas) hands one over', async () => {
    const prefix = freshPrefix();
    const sources = ['s1', 's2', 's3'];
    const a = leasesFor(prefix, 'a', { sources, ttlMs: 1_000 });
    const aLocks = await Promise.all(sources.map((s) => a.acquire(s, never, () => undefined)));
    expect(a.held().sort()).toEqual(sources);
    const b = leasesFor(prefix, 'b', { sources, ttlMs: 1_000 });
    const bLocks: HeldLease[] = [];
    for (const s of sources) void b.acquire(s, never, () => undefined).then((l) => l && bLocks.push(l));
    // a sees two replicas (share 2 of 3) and lets its longest-held lease go; its poller would
    // then release it, as the daemon does.
    const handedOver = await Promise.race(aLocks.map((lock, i) => lostWithin(lock!, 5_000).then(() => i)));
    await aLocks[handedOver]!.release();
    const deadline = Date.now() + 5_000;
    while (b.held().length < 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(b.held()).toEqual([sources[handedOver]]);
    expect(a.held()).toHaveLength(2);
    // Stable: no further hand-over once both are at their share.
    await new Promise((r) => setTimeout(r, 1_500));
    expect(a.held()).toHaveLength(2);
    expect(b.held()).toHaveLength(1);
    for (const lock of bLocks) await lock.release();
  });

  it('fires `lost` when Redis stays unreachable for longer than the TTL', async () => {
    const own = await startRedis();
    try {
      const leases = leasesFor(freshPrefix(), 'me', { ttlMs: 1_000, redisUrl: own.url });
      const lock = (await leases.acquire('scheduling', never, () => undefined))!;
      own.kill();
      await lostWithin(lock, 3_000);
      await lock.release();
    } finally {
      await own.stop();
    }
  });

  it('stops waiting when the signal aborts', async () => {
    const prefix = freshPrefix();
    const a = leasesFor(prefix, 'a');
    const b = leasesFor(prefix, 'b');
    await a.acquire('scheduling', never, () => undefined);
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 300);
    expect(await b.acquire('scheduling', controller.signal, () => undefined)).toBeUndefined();
  });
  it("`cursor set`'s save is judged by the lease rule: a lease Redis forgot is restored, one taken since refuses", async () => {
    const prefix = freshPrefix();
    const leaseKey = `{${prefix}}:lease:scheduling`;
    const stateKey = `{${prefix}}:source:scheduling`;
    const client = new Redis(redis.url);
    cleanups.push(async () => client.disconnect());
    const hold = async () => {
      const held = await holdSource(client, prefix, 'scheduling', 3_000, 'command', silentLogger);
      if ('holder' in held) throw new Error(`held by ${held.holder}`);
      cleanups.push(() => held.release());
      return held;
    };
    // Redis lost its last writes, the command's lease among them: the save restores it.
    const first = await hold();
    const value = await inspector.get(leaseKey);
    await inspector.del(leaseKey);
    await first.save(7, []);
    expect(await inspector.hget(stateKey, 'cursor')).toBe('7');
    expect(await inspector.get(leaseKey)).toBe(value);
    await first.release();
    // A newer token was handed out (a poller took the source): the save writes nothing.
    const second = await hold();
    await inspector.del(leaseKey);
    const poller = leasesFor(prefix, 'poller', { sources: ['scheduling'] });
    await poller.acquire('scheduling', never, () => undefined);
    await expect(second.save(3, [])).rejects.toThrow(/a poller took the source/);
    expect(await inspector.hget(stateKey, 'cursor')).toBe('7');
  });
});
