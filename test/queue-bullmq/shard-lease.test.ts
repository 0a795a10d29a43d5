// Shard leases on a real Redis (src/queue/bullmq/shard-lease.ts over leases.ts): each `work`
// process holds its share of every sink's shards for as long as it serves them, a joining process
// gets its share from the one that held them all, and a progress write is fenced by the lease and
// the job's lock.
import { afterEach, describe, expect, it } from 'vitest';
import { RedisLeases, type HeldRedisLease } from '../../src/lease/redis-leases.js';
import { shardLease, shardLeaseSpec } from '../../src/queue/bullmq/shard-lease.js';
import { backlogKey, shardLeaseKey, shardLeaseTokenKey } from '../../src/queue/bullmq/names.js';
import { silentLogger, useRedis } from './support.js';

const redis = useRedis();
const TAG = '{shard-lease-test}';
const SHARDS = 4;
const SINKS = ['file', 'hook'];
const never = new AbortController().signal;
const opened: RedisLeases[] = [];
afterEach(async () => {
  for (const leases of opened.splice(0)) await leases.close();
  await redis.client.flushall();
});

function member(owner: string, ttlMs = 1_000): RedisLeases {
  const leases = new RedisLeases({
    client: redis.client.duplicate(),
    membersKey: `${TAG}:workers`,
    owner,
    ttlMs,
    logger: silentLogger,
    groupSize: () => SHARDS,
    what: 'shard',
    holder: 'its consumer',
  });
  opened.push(leases);
  return leases;
}

/** Serves every shard of every sink the way delivery.ts does: acquire, hold until lost, release, again. */
function serveAll(leases: RedisLeases, stop: AbortSignal): Map<string, HeldRedisLease> {
  const holding = new Map<string, HeldRedisLease>();
  for (const sink of SINKS)
    for (let shard = 0; shard < SHARDS; shard++) {
      const spec = shardLeaseSpec(TAG, sink, shard);
      void (async () => {
        while (!stop.aborted) {
          const held = await leases.acquire(spec, stop);
          if (!held) return;
          holding.set(spec.name, held);
          await new Promise<void>((resolve) => {
            const done = AbortSignal.any([stop, held.lost]);
            if (done.aborted) resolve();
            done.addEventListener('abort', () => resolve(), { once: true });
          });
          holding.delete(spec.name);
          await held.release();
        }
      })();
    }
  return holding;
}

const perSink = (holding: Map<string, unknown>, sink: string): number =>
  [...holding.keys()].filter((name) => name.startsWith(`${TAG}:${sink}.`)).length;

async function until(check: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('shard leases', () => {
  it('a process alone serves every shard; a second one gets half of each sink, without overlap', async () => {
    const stop = new AbortController();
    const a = serveAll(member('a'), stop.signal);
    await until(() => a.size === SINKS.length * SHARDS, 3_000, 'a serving every shard');
    const b = serveAll(member('b'), stop.signal);
    await until(
      () => SINKS.every((sink) => perSink(a, sink) === SHARDS / 2 && perSink(b, sink) === SHARDS / 2),
      5_000,
      'each process serving half of each sink',
    );
    expect(
      [...a.keys()].filter((name) => b.has(name)),
      'no shard served by both',
    ).toEqual([]);
    // Stable once both hold their share.
    const before = [...a.keys()].sort();
    await new Promise((r) => setTimeout(r, 1_200));
    expect([...a.keys()].sort()).toEqual(before);
    stop.abort();
  });

  it('a lease handed over stays renewed until its holder releases it: the next holder waits for the call in flight', async () => {
    const a = member('a');
    const spec = (shard: number) => shardLeaseSpec(TAG, 'file', shard);
    const held = await Promise.all(Array.from({ length: SHARDS }, (_, i) => a.acquire(spec(i), never)));
    // `b` registers, which makes `a` hold more than its share: at a heartbeat it hands two over.
    const b = member('b');
    const taken = Array.from({ length: SHARDS }, (_, i) => b.acquire(spec(i), never));
    await until(() => held.filter((h) => h!.handedOver()).length === SHARDS / 2, 5_000, 'two handed over');
    const handed = held.filter((h) => h!.handedOver());
    for (const h of handed) {
      expect(h!.valid(), 'a handed-over lease lets its holder act no more').toBe(false);
      expect(h!.lost.aborted).toBe(true);
    }
    // Its holder is still finishing a call, for three TTLs: the lease does not expire meanwhile.
    await new Promise((r) => setTimeout(r, 3_000));
    for (const h of handed) expect(await redis.client.get(h!.fence.leaseKey)).toBe(h!.fence.value);
    const bHolds = async () =>
      (await Promise.all(handed.map((h) => redis.client.get(h!.fence.leaseKey)))).filter((v) =>
        v?.endsWith(' b'),
      ).length;
    expect(await bHolds()).toBe(0);
    // Released once the call returned: `b` takes them at its next try.
    for (const h of handed) await h!.release();
    const deadline = Date.now() + 3_000;
    while ((await bHolds()) < SHARDS / 2 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    expect(await bHolds()).toBe(SHARDS / 2);
    // The other two stay `a`'s: `b` has its share. Its waiting acquires end when it closes.
    void Promise.all(taken);
  });

  it('fences progress writes by the lease and the job lock; a lease taken over is lost and invalid', async () => {
    const leases = member('a', 1_000);
    const spec = shardLeaseSpec(TAG, 'file', 0);
    const held = (await leases.acquire(spec, never))!;
    const lease = shardLease(redis.client, 'shard-lease-test', TAG, 'file', 0, held, 1_000);
    expect(lease.fence().scope).toBe('shard:file:0');
    const jobKey = `${TAG}:file.0:job-1`;
    await redis.client.set(`${jobKey}:lock`, 'lock-1');
    await redis.client.hset(backlogKey(TAG), 'file', 5);
    expect(await lease.saveProgress(jobKey, 'lock-1', { done: 2, attempts: 0 })).toBe(true);
    expect(await redis.client.hget(backlogKey(TAG), 'file'), 'delivered changes leave the backlog').toBe('3');
    expect(await lease.saveProgress(jobKey, 'another-lock', { done: 3, attempts: 0 }), 'not our job').toBe(
      false,
    );
    // Another process took the shard (the key expired while this one was paused).
    await redis.client.set(shardLeaseKey(TAG, 'file', 0), `${held.fence.token + 1} b`, 'PX', 10_000);
    expect(await lease.saveProgress(jobKey, 'lock-1', { done: 3, attempts: 0 })).toBe(false);
    expect(JSON.parse((await redis.client.hget(jobKey, 'progress'))!)).toEqual({ done: 2, attempts: 0 });
    await until(() => held.lost.aborted, 2_000, 'the renewal noticing the lease taken');
    expect(lease.valid()).toBe(false);
    await held.release();
    expect(await redis.client.get(shardLeaseKey(TAG, 'file', 0)), 'release leaves the new holder').toMatch(
      / b$/,
    );
  });

  it('a lease Redis forgot, or shows from before it, is restored for its holder, unless a newer token was handed out since', async () => {
    const leases = member('a', 1_000);
    const held = (await leases.acquire(shardLeaseSpec(TAG, 'file', 1), never))!;
    const lease = shardLease(redis.client, 'shard-lease-test', TAG, 'file', 1, held, 1_000);
    const key = shardLeaseKey(TAG, 'file', 1);
    const tokenKey = shardLeaseTokenKey(TAG, 'file', 1);
    const jobKey = `${TAG}:file.1:job-2`;
    await redis.client.set(`${jobKey}:lock`, 'lock-2');
    // Redis restarts without its last second of writes: the lease and the counter's last step.
    await redis.client.del(key);
    await redis.client.set(tokenKey, String(held.fence.token - 5));
    expect(await lease.saveProgress(jobKey, 'lock-2', { done: 1, attempts: 0 })).toBe(true);
    expect(await redis.client.get(key)).toBe(held.fence.value);
    expect(Number(await redis.client.get(tokenKey)), 'the next token is above the holder’s again').toBe(
      held.fence.token,
    );
    // Forgotten again: the renewal restores it as well, and the holder keeps it.
    await redis.client.del(key);
    await new Promise((r) => setTimeout(r, 600));
    expect(await redis.client.get(key)).toBe(held.fence.value);
    expect(held.lost.aborted).toBe(false);
    expect(lease.valid()).toBe(true);
    // Redis shows again a lease from before this one (a lower token): this one is restored over it.
    await redis.client.set(key, `${held.fence.token - 7} old-holder`, 'PX', 10_000);
    expect(await lease.saveProgress(jobKey, 'lock-2', { done: 1, attempts: 0 })).toBe(true);
    expect(await redis.client.get(key)).toBe(held.fence.value);
    await redis.client.set(key, `${held.fence.token - 7} old-holder`, 'PX', 10_000);
    await new Promise((r) => setTimeout(r, 600));
    expect(await redis.client.get(key), 'the renewal restores it too').toBe(held.fence.value);
    expect(held.lost.aborted).toBe(false);
    // An older lease shown again, but a newer token was handed out since: neither is ours to write.
    await redis.client.set(key, `${held.fence.token - 7} old-holder`, 'PX', 10_000);
    await redis.client.set(tokenKey, String(held.fence.token + 1));
    expect(await lease.saveProgress(jobKey, 'lock-2', { done: 2, attempts: 0 })).toBe(false);
    expect(await redis.client.get(key)).toBe(`${held.fence.token - 7} old-holder`);
    await redis.client.set(tokenKey, String(held.fence.token));
    // Forgotten, but another process was given a newer token meanwhile (and let it go): not ours.
    await redis.client.del(key);
    await redis.client.set(tokenKey, String(held.fence.token + 1));
    expect(await lease.saveProgress(jobKey, 'lock-2', { done: 2, attempts: 0 })).toBe(false);
    expect(await redis.client.get(key)).toBeNull();
    await until(() => held.lost.aborted, 2_000, 'the renewal finding a newer token');
    expect(lease.valid()).toBe(false);
    await held.release();
  });

  it('close lets its leases go, and gives up waiting within a second when Redis does not answer', async () => {
    const leases = member('a', 2_000);
    const spec = shardLeaseSpec(TAG, 'file', 0);
    expect(await leases.acquire(spec, never)).toBeDefined();
    const calm = member('b', 2_000);
    const other = shardLeaseSpec(TAG, 'file', 1);
    expect(await calm.acquire(other, never)).toBeDefined();
    await calm.close();
    expect(await redis.client.get(shardLeaseKey(TAG, 'file', 1)), 'released by close').toBeNull();
    // Redis stops answering (as a frozen server would), for longer than close may wait.
    const pauser = redis.client.duplicate();
    await pauser.client('PAUSE', 2_500, 'ALL');
    try {
      const started = performance.now();
      await leases.close();
      expect(performance.now() - started).toBeLessThan(1_800);
    } finally {
      await pauser.client('UNPAUSE');
      pauser.disconnect();
    }
  });
});
