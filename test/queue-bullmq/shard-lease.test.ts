// The shard lease of a worker (src/queue/bullmq/shard-lease.ts) on a real Redis: a lease another
// worker holds is waited for; one this very process left behind (its release failed while Redis
// was away: across a Sentinel failover the promoted replica keeps it) is taken over at once, but
// never while a delivery of this process still holds it.
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { shardLeaseKey, shardLeaseTokenKey } from '../../src/queue/bullmq/names.js';
import { ShardLeases, type ShardLease } from '../../src/queue/bullmq/shard-lease.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { silentLogger } from './support.js';

let redis: RedisServer;
let client: Redis;

beforeAll(async () => {
  redis = await startRedis();
  client = new Redis(redis.url);
});
afterAll(async () => {
  client?.disconnect();
  await redis?.stop();
});

const TAG = '{lease-test}';
const OWNER = 'host:1';

/** A job whose lock this worker holds (the lease is taken for one job). */
async function job(name: string): Promise<{ key: string; lockToken: string }> {
  const key = `${TAG}:file.0:${name}`;
  await client.set(`${key}:lock`, 'lock-token');
  return { key, lockToken: 'lock-token' };
}

function leases(): ShardLeases {
  return new ShardLeases({
    connection: client,
    prefix: 'lease-test',
    ttlMs: 60_000,
    owner: OWNER,
    logger: silentLogger,
  });
}

/** acquire() of shard 0, given up after `ms`. */
async function acquireWithin(
  of: ShardLeases,
  ms: number,
  name: string,
): Promise<ShardLease | 'not-ours' | undefined> {
  return of.acquire(TAG, 'file', 0, await job(name), AbortSignal.timeout(ms));
}

describe('shard leases', () => {
  it("waits for another worker's lease", async () => {
    await client.set(shardLeaseKey(TAG, 'file', 0), '7 host:2', 'PX', 60_000);
    await expect(acquireWithin(leases(), 400, 'j1')).resolves.toBeUndefined();
    expect(await client.get(shardLeaseKey(TAG, 'file', 0))).toBe('7 host:2');
    await client.del(shardLeaseKey(TAG, 'file', 0));
  });

  it('takes over at once a lease of its own that no delivery of this process holds', async () => {
    await client.set(shardLeaseTokenKey(TAG, 'file', 0), '9');
    await client.set(shardLeaseKey(TAG, 'file', 0), `9 ${OWNER}`, 'PX', 60_000);
    const lease = await acquireWithin(leases(), 2_000, 'j2');
    expect(lease, 'taken within the wait, not after the 60 s TTL').not.toBeUndefined();
    expect((lease as ShardLease).token, 'with a new, larger token').toBeGreaterThan(9);
    await (lease as ShardLease).release();
    expect(await client.get(shardLeaseKey(TAG, 'file', 0))).toBeNull();
  });

  it('does not take its own lease while a delivery of this process holds it', async () => {
    const shared = leases();
    const first = (await acquireWithin(shared, 2_000, 'j3')) as ShardLease;
    expect(first).toBeDefined();
    await expect(
      acquireWithin(shared, 400, 'j4'),
      'second slice of the shard waits',
    ).resolves.toBeUndefined();
    await first.release();
    const second = (await acquireWithin(shared, 2_000, 'j4')) as ShardLease;
    expect(second.token).toBeGreaterThan(first.token);
    await second.release();
  });
});
