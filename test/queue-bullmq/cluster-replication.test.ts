// queue.min_replicas_acked on a Redis Cluster: WAIT must run on the primary of the slot the commit
// wrote to, on the connection that wrote. A WAIT sent anywhere else returns at once with that
// node's replicas, so a commit would count as replicated when it is not. Shown by freezing the
// replicas of one primary: a write under a key it owns is not acknowledged; one elsewhere is.
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisConnection } from '../../src/queue/bullmq/redis.js';
import { awaitReplicas, NotReplicatedError } from '../../src/queue/bullmq/replication.js';
import { startRedisCluster, type RedisClusterSet } from '../support/redis-cluster.js';
import type { Redis } from 'ioredis';

const logger = pino({ level: 'silent' });

describe('WAIT on a Redis Cluster', () => {
  let cluster: RedisClusterSet;
  let client: Redis;

  beforeAll(async () => {
    cluster = await startRedisCluster({ password: 'wait-pw' });
    client = createRedisConnection(cluster.url, 'producer', logger);
  }, 60_000);
  afterAll(async () => {
    client?.disconnect();
    await cluster?.stop();
  });

  it("waits on the primary of the commit's slot, over the connection that wrote", async () => {
    // Two tags on different primaries.
    const tags: string[] = [];
    const owners = new Set<number>();
    for (let i = 0; tags.length < 2; i++) {
      const tag = `{w${i}}`;
      const owner = await cluster.ownerOf(tag);
      if (!owners.has(owner)) {
        owners.add(owner);
        tags.push(tag);
      }
    }
    const [frozenTag, freeTag] = tags as [string, string];
    await client.set(`${frozenTag}:x`, '0');
    await client.set(`${freeTag}:x`, '0');
    await awaitReplicas(client, 1, 'warm-up', { tag: frozenTag });
    const frozen = await cluster.replicasOf(frozenTag);
    expect(frozen.length).toBeGreaterThan(0);
    for (const port of frozen) cluster.signal(port, 'SIGSTOP');
    try {
      // Three times over: a WAIT sent to a node picked at random would pass once by luck.
      for (let i = 1; i <= 3; i++) {
        await client.set(`${frozenTag}:x`, String(i));
        await expect(awaitReplicas(client, 1, 'the write', { tag: frozenTag })).rejects.toBeInstanceOf(
          NotReplicatedError,
        );
        // The same connection, a write under a primary whose replica is live: acknowledged.
        await client.set(`${freeTag}:x`, String(i));
        await expect(awaitReplicas(client, 1, 'the other write', { tag: freeTag })).resolves.toBeUndefined();
      }
    } finally {
      for (const port of frozen) cluster.signal(port, 'SIGCONT');
    }
    // Thawed, the first write is acknowledged too.
    await expect(awaitReplicas(client, 1, 'after the thaw', { tag: frozenTag })).resolves.toBeUndefined();
  });
});
