// Pages on a Redis Cluster go through the source's outbox to shard queues in their own slots
// (src/queue/bullmq/outbox.ts). Shown on a real 3-primary cluster: the queues of one sink spread
// over the primaries, each change lands once and in feed order per shard, a forward cut short is
// finished by the next one (by the same holder or a new one) without a copy, and a holder whose
// token is older than one that already forwarded to a queue is refused there.
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Change } from '../../src/core/change.js';
import type { LeaseFence } from '../../src/queue/bullmq/lease.js';
import {
  forwardTokenKey,
  KeySpace,
  outboxKey,
  shardOf,
  shardQueueName,
} from '../../src/queue/bullmq/names.js';
import { createOutboxForwarder, type OutboxForwarder } from '../../src/queue/bullmq/outbox.js';
import { LeaseFencedError } from '../../src/queue/bullmq/page-commit.js';
import { createBullmqProducer, type BullmqProducer } from '../../src/queue/bullmq/producer.js';
import { createRedisConnection, unwatchKey, whenReady } from '../../src/queue/bullmq/redis.js';
import type { ChangeSlice } from '../../src/queue/bullmq/slice.js';
import type { QueueConfig } from '../../src/config/types.js';
import { startRedisCluster, type RedisClusterSet } from '../support/redis-cluster.js';
import { ANY, makeChange, queueConfig, range, silentLogger } from './support.js';

const SHARDS = 4;
const PASSWORD = 'outbox-pw';
const SINKS = ['a', 'b'];

let cluster: RedisClusterSet;
let client: Redis;

beforeAll(async () => {
  cluster = await startRedisCluster({ password: PASSWORD });
  client = createRedisConnection(cluster.url, 'admin', silentLogger);
}, 60_000);
afterAll(async () => {
  client?.disconnect();
  await cluster?.stop();
});

/**
 * A producer fenced by `fence` (whatever it says; the lease key is set to match by the test) that
 * drops forwarded pages from the outbox after `dropAfterMs` (default at once).
 */
function producer(
  config: QueueConfig,
  fence?: () => LeaseFence | undefined,
  dropAfterMs = 0,
  sinks = SINKS,
): BullmqProducer {
  return createBullmqProducer({
    queue: config,
    sinks: sinks.map((name) => ({ name, filter: ANY })),
    logger: silentLogger,
    keys: KeySpace.cluster(config.prefix, config.shards),
    outboxDropAfterMs: dropAfterMs,
    ...(fence ? { leases: { fence, markLost: () => undefined } } : {}),
  });
}

/** Everything of `tag`'s slot gone, as if its primary came back from an AOF without its last writes. */
async function wipeSlot(tag: string): Promise<void> {
  const node = new Redis({ port: await cluster.ownerOf(tag), password: PASSWORD });
  try {
    const found = await node.keys(`${tag}*`);
    if (found.length) await node.del(...found);
  } finally {
    node.disconnect();
  }
}

/** Per shard, the changes its queue holds, in the order they were added. */
async function queued(config: QueueConfig, sink: string): Promise<Change[][]> {
  const keys = KeySpace.cluster(config.prefix, config.shards);
  const out: Change[][] = [];
  for (let shard = 0; shard < config.shards; shard++) {
    const queue = new Queue<ChangeSlice>(shardQueueName(sink, shard), {
      connection: client,
      prefix: keys.queueTag(sink, shard),
    });
    const jobs = await queue.getJobs(['wait'], 0, -1, true);
    out.push(jobs.flatMap((job) => job.data.changes));
    await queue.close();
  }
  return out;
}

/** A bare forwarder on `connection` (no replicas, drops at once) putting slices where `queueOf` says. */
function bareForwarder(
  connection: Redis,
  keys: KeySpace,
  queueOf: (sink: string, shard: number) => Queue<ChangeSlice>,
): OutboxForwarder {
  return createOutboxForwarder({
    connection,
    keys,
    queueOf,
    jobOptions: {},
    minReplicasAcked: 0,
    connectionEpoch: () => 0,
    fenced: (source, detail) => new LeaseFencedError(source, detail),
    dropAfterMs: 0,
  });
}

/** Changes about 7 subjects, so that every shard gets some. */
const page = (ids: number[]) => ids.map((id) => makeChange(id, { subject: `https://s/titles/${id % 7}` }));

/** Commits with `p` a page of `count` events from `first` on (cursor: its last id) per pair, then closes it. */
async function commitAll(p: BullmqProducer, ...pages: [first: number, count: number][]): Promise<void> {
  try {
    for (const [first, count] of pages)
      await p.commitPage({
        source: 'scheduling',
        changes: page(range(first, count)),
        cursor: first + count - 1,
        seenAbove: [],
      });
  } finally {
    await p.close();
  }
}

async function fence(config: QueueConfig, token: number): Promise<LeaseFence> {
  const keys = KeySpace.cluster(config.prefix, config.shards);
  const tag = keys.of('scheduling');
  const f = {
    leaseKey: `${tag}:lease:scheduling`,
    tokenKey: `${tag}:lease-token:scheduling`,
    value: `${token} test`,
    token,
  };
  await client.set(f.leaseKey, f.value);
  await client.set(f.tokenKey, String(token));
  return f;
}

function expectOnceInOrder(perShard: Change[][], ids: number[], shards = SHARDS): void {
  const all = perShard.flat().map((c) => c.event_id);
  expect(all.sort((x, y) => x - y)).toEqual(ids);
  for (const [shard, changes] of perShard.entries()) {
    const got = changes.map((c) => c.event_id);
    expect(got, `shard ${shard} in feed order`).toEqual([...got].sort((x, y) => x - y));
    for (const c of changes) expect(shardOf(c, shards)).toBe(shard);
  }
}

describe('page outbox on a Redis Cluster', () => {
  it('puts each change once, in feed order, into shard queues spread over the primaries', async () => {
    const config = queueConfig(cluster.url, { shards: SHARDS });
    await commitAll(producer(config), [1, 50], [51, 30]);
    const keys = KeySpace.cluster(config.prefix, SHARDS);
    for (const sink of SINKS) expectOnceInOrder(await queued(config, sink), range(1, 80));
    expect(await client.llen(outboxKey(keys, 'scheduling')), 'outbox emptied').toBe(0);
    const owners = new Set(
      await Promise.all(
        SINKS.flatMap((sink) => range(0, SHARDS).map((shard) => cluster.ownerOf(keys.queueTag(sink, shard)))),
      ),
    );
    expect(owners.size, 'the shard queues live on more than one primary').toBeGreaterThan(1);
    // The backlog is counted where the slices landed.
    let backlog = 0;
    for (const shard of range(0, SHARDS))
      backlog += Number(await client.hget(`${keys.queueTag('a', shard)}:backlog`, 'a'));
    expect(backlog).toBe(80);
  });

  it('finishes a forward cut short, by the same holder or the next, with no copy', async () => {
    const config = queueConfig(cluster.url, { shards: SHARDS });
    const keys = KeySpace.cluster(config.prefix, SHARDS);
    // Sink b's shard 2 refuses job adds (its queue's meta key has the wrong type): pages commit,
    // then forwarding stops at that queue, having forwarded to some others.
    const broken = `${keys.queueTag('b', 2)}:${shardQueueName('b', 2)}:meta`;
    const first = await fence(config, 1);
    const p1 = producer(config, () => first);
    try {
      await p1.commitPage({ source: 'scheduling', changes: page(range(1, 50)), cursor: 50, seenAbove: [] });
      await client.set(broken, 'not a hash');
      await expect(
        p1.commitPage({ source: 'scheduling', changes: page(range(51, 50)), cursor: 100, seenAbove: [] }),
      ).rejects.toThrow(/forward|refused/i);
      // The page is committed (its cursor moved) and waits in the outbox.
      expect(await client.hget(`${keys.of('scheduling')}:source:scheduling`, 'cursor')).toBe('100');
      expect(await client.llen(outboxKey(keys, 'scheduling'))).toBe(1);
      // Retried by the same holder while the queue still refuses: still there, nothing twice.
      await expect(p1.laggingSinks('scheduling')).rejects.toThrow();
      expect(await client.llen(outboxKey(keys, 'scheduling'))).toBe(1);
    } finally {
      await p1.close();
    }
    // The next holder (a new token) finds it between its commits once the queue accepts again.
    await client.del(broken);
    const second = await fence(config, 2);
    const p2 = producer(config, () => second);
    try {
      await p2.laggingSinks('scheduling');
      expect(await client.llen(outboxKey(keys, 'scheduling'))).toBe(0);
      await p2.commitPage({
        source: 'scheduling',
        changes: page(range(101, 20)),
        cursor: 120,
        seenAbove: [],
      });
    } finally {
      await p2.close();
    }
    for (const sink of SINKS) expectOnceInOrder(await queued(config, sink), range(1, 120));
  });

  it('refuses a holder whose token is older than one that forwarded to the queue', async () => {
    const config = queueConfig(cluster.url, { shards: 1 });
    const keys = KeySpace.cluster(config.prefix, 1);
    const old = await fence(config, 3);
    const queue = new Queue<ChangeSlice>(shardQueueName('a', 0), {
      connection: client,
      prefix: keys.queueTag('a', 0),
    });
    // The outbox as a commit leaves it (seq, then the entry); a newer holder forwarded there.
    const entry = { id: 'e1', slices: [{ sink: 'a', shard: 0, jobId: 'j1', changes: page([1]) }] };
    await client.rpush(outboxKey(keys, 'scheduling'), `1 ${JSON.stringify(entry)}`);
    await client.set(forwardTokenKey(keys.queueTag('a', 0), 'scheduling'), '4');
    const forwarder = bareForwarder(client, keys, () => queue);
    try {
      await expect(forwarder.forward('scheduling', old)).rejects.toBeInstanceOf(LeaseFencedError);
      expect(await queue.getJobCounts('wait')).toEqual({ wait: 0 });
      expect(await client.llen(outboxKey(keys, 'scheduling'))).toBe(1);
      // The holder with that token goes on.
      const current = await fence(config, 4);
      await expect(forwarder.forward('scheduling', current)).resolves.toBe(1);
      expect(await queue.getJobCounts('wait')).toEqual({ wait: 1 });
      // Forwarding the same entry again (its drop lost, say) adds nothing.
      await client.rpush(outboxKey(keys, 'scheduling'), `1 ${JSON.stringify(entry)}`);
      await client.del(`${keys.queueTag('a', 0)}:a.0:j1`);
      await expect(forwarder.forward('scheduling', current)).resolves.toBe(1);
      expect(await queue.getJobCounts('wait')).toEqual({ wait: 1 });
    } finally {
      await queue.close();
    }
  });

  it('gives a queue that lost its last writes the pages again, in order, while the outbox holds them', async () => {
    const config = queueConfig(cluster.url, { shards: SHARDS });
    const keys = KeySpace.cluster(config.prefix, SHARDS);
    const lossy = keys.queueTag('a', 1);
    // Kept in the outbox for a minute: the next forward to a queue checks what it still has.
    const p = producer(config, undefined, 60_000);
    try {
      await p.commitPage({ source: 'scheduling', changes: page(range(1, 50)), cursor: 50, seenAbove: [] });
      await wipeSlot(lossy);
      await p.commitPage({ source: 'scheduling', changes: page(range(51, 50)), cursor: 100, seenAbove: [] });
    } finally {
      await p.close();
    }
    for (const sink of SINKS) expectOnceInOrder(await queued(config, sink), range(1, 100));
    expect(await client.llen(outboxKey(keys, 'scheduling')), 'both pages still held').toBe(2);
  });

  it('checks the queues once more before dropping a page from the outbox', async () => {
    const config = queueConfig(cluster.url, { shards: SHARDS });
    const keys = KeySpace.cluster(config.prefix, SHARDS);
    const p = producer(config, undefined, 300);
    try {
      await p.commitPage({ source: 'scheduling', changes: page(range(1, 50)), cursor: 50, seenAbove: [] });
      expect(await client.llen(outboxKey(keys, 'scheduling'))).toBe(1);
      await wipeSlot(keys.queueTag('b', 3));
      await new Promise((resolve) => setTimeout(resolve, 400));
      // Between commits (an idle feed): the page is due, found missing in b.3, forwarded again.
      await p.laggingSinks('scheduling');
    } finally {
      await p.close();
    }
    for (const sink of SINKS) expectOnceInOrder(await queued(config, sink), range(1, 50));
    expect(await client.llen(outboxKey(keys, 'scheduling')), 'dropped once checked').toBe(0);
  });

  it('forwards pages held for a sink or shard the config no longer has, without stopping the source', async () => {
    const config = queueConfig(cluster.url, { shards: SHARDS });
    const keys = KeySpace.cluster(config.prefix, SHARDS);
    // Forwarded, and still held (for a minute) when the process restarts with one sink and 2 shards.
    await commitAll(producer(config, undefined, 60_000), [1, 50]);
    // Shard 3 of sink a lost its last writes meanwhile: the held page must still reach it.
    await wipeSlot(keys.queueTag('a', 3));
    const fewer = { ...config, shards: 2 };
    await commitAll(producer(fewer, undefined, 0, ['a']), [51, 20]);
    expect(await client.llen(outboxKey(keys, 'scheduling')), 'outbox emptied').toBe(0);
    // The first page where it was committed to, once: b's 4 shards, a's 4 (shard 3 again).
    expectOnceInOrder(await queued(config, 'b'), range(1, 50));
    const a = await queued(config, 'a');
    expectOnceInOrder(
      a.map((changes) => changes.filter((c) => c.event_id <= 50)),
      range(1, 50),
    );
    // The second page over the 2 shards configured now.
    expectOnceInOrder(
      a.slice(0, 2).map((changes) => changes.filter((c) => c.event_id > 50)),
      range(51, 20),
      2,
    );
  });

  it('counts a page read again under a new entry once in the backlog, its jobs being there already', async () => {
    const config = queueConfig(cluster.url, { shards: SHARDS });
    const keys = KeySpace.cluster(config.prefix, SHARDS);
    const backlog = async (sink: string) => {
      let n = 0;
      for (const shard of range(0, SHARDS))
        n += Number((await client.hget(`${keys.queueTag(sink, shard)}:backlog`, sink)) ?? 0);
      return n;
    };
    const p = producer(config);
    try {
      await p.commitPage({ source: 'scheduling', changes: page(range(1, 50)), cursor: 50, seenAbove: [] });
      expect(await backlog('a')).toBe(50);
      // The source's primary forgot the commit (cursor back), the queues did not: the page is read
      // and committed again, a new outbox entry whose slices are the jobs already queued.
      await client.hset(`${keys.of('scheduling')}:source:scheduling`, 'cursor', '0');
      await p.commitPage({ source: 'scheduling', changes: page(range(1, 50)), cursor: 50, seenAbove: [] });
    } finally {
      await p.close();
    }
    for (const sink of SINKS) {
      expectOnceInOrder(await queued(config, sink), range(1, 50));
      expect(await backlog(sink), `backlog of ${sink}: the 50 changes queued, once`).toBe(50);
    }
  });

  it('counts the jobs an earlier, failed forward of the same page added, and only those', async () => {
    const config = queueConfig(cluster.url, { shards: 1 });
    const keys = KeySpace.cluster(config.prefix, 1);
    const tag = keys.queueTag('a', 0);
    const queue = new Queue<ChangeSlice>(shardQueueName('a', 0), { connection: client, prefix: tag });
    const at = Date.now() - 60_000;
    // A try whose MARK failed left j1 in the queue, added for this entry (its timestamp), uncounted
    // and unmarked; j0 is there from an earlier commit of the same page (another entry, counted).
    await queue.add('slice', { changes: page([1, 2, 3]) }, { jobId: 'j1', timestamp: at });
    await queue.add('slice', { changes: page([7, 8]) }, { jobId: 'j0', timestamp: at - 5_000 });
    const slices = [
      { sink: 'a', shard: 0, jobId: 'j0', changes: page([7, 8]) },
      { sink: 'a', shard: 0, jobId: 'j1', changes: page([1, 2, 3]) },
      { sink: 'a', shard: 0, jobId: 'j2', changes: page([4, 5, 6, 9]) },
    ];
    await client.rpush(outboxKey(keys, 'scheduling'), `1 ${JSON.stringify({ id: 'e1', at, slices })}`);
    const forwarder = bareForwarder(client, keys, () => queue);
    try {
      await expect(forwarder.forward('scheduling', undefined)).resolves.toBe(1);
      expect(await queue.getJobCounts('wait')).toEqual({ wait: 3 });
      // j1 (3 changes) and j2 (4); not j0, counted by the commit that added it.
      expect(await client.hget(`${tag}:backlog`, 'a')).toBe('7');
    } finally {
      await queue.close();
    }
  });

  it('keeps the marks of a dropped page until the drop is old enough to have lasted', async () => {
    const config = queueConfig(cluster.url, { shards: SHARDS });
    const keys = KeySpace.cluster(config.prefix, SHARDS);
    const outbox = outboxKey(keys, 'scheduling');
    const p1 = producer(config, undefined, 200);
    let first: string;
    try {
      await p1.commitPage({ source: 'scheduling', changes: page(range(1, 50)), cursor: 50, seenAbove: [] });
      first = (await client.lindex(outbox, 0))!;
      await new Promise((resolve) => setTimeout(resolve, 250));
      // Page 2's forward drops page 1 (due), page 3's forward right after would prune its marks.
      await p1.commitPage({ source: 'scheduling', changes: page(range(51, 20)), cursor: 70, seenAbove: [] });
      await p1.commitPage({ source: 'scheduling', changes: page(range(71, 20)), cursor: 90, seenAbove: [] });
    } finally {
      await p1.close();
    }
    // The source's primary comes back without that drop (a host crash before the fsync): page 1
    // is at the head again. Its slices were delivered and removed from the queues meanwhile.
    await client.lpush(outbox, first);
    const entry = JSON.parse(first.slice(first.indexOf(' ') + 1)) as {
      slices: { sink: string; shard: number; jobId: string }[];
    };
    for (const slice of entry.slices) {
      const queue = new Queue<ChangeSlice>(shardQueueName(slice.sink, slice.shard), {
        connection: client,
        prefix: keys.queueTag(slice.sink, slice.shard),
      });
      await queue.remove(slice.jobId);
      await queue.close();
    }
    // The next holder forwards the outbox: the marks say page 1 is in its queues, so nothing of it
    // is queued again (without them, behind pages 2 and 3: a copy, out of order).
    const p2 = producer(config, undefined, 60_000);
    try {
      await p2.laggingSinks('scheduling');
    } finally {
      await p2.close();
    }
    for (const sink of SINKS) expectOnceInOrder(await queued(config, sink), range(51, 40));
  });

  it('clears a WATCH on the node that holds it (UNWATCH has no key: a cluster sends it anywhere)', async () => {
    const connection = createRedisConnection(cluster.url, 'producer', silentLogger);
    const other = createRedisConnection(cluster.url, 'admin', silentLogger);
    try {
      await whenReady(connection, 5_000);
      // Keys on every primary: a stray UNWATCH would miss two of three.
      for (const n of range(0, 6)) {
        const key = `{unwatch-${n}}:watched`;
        await connection.watch(key);
        await unwatchKey(connection, key);
        await other.set(key, String(n));
        const results = await connection.multi().set(`{unwatch-${n}}:written`, '1').exec();
        expect(results, `EXEC after the WATCH of ${key} was cleared`).not.toBeNull();
      }
    } finally {
      connection.disconnect();
      other.disconnect();
    }
  });

  it('refuses a holder frozen mid-forward once the next holder forwarded and dropped its page', async () => {
    const config = queueConfig(cluster.url, { shards: 2 });
    const keys = KeySpace.cluster(config.prefix, 2);
    const closers: (() => Promise<unknown>)[] = [];
    /** A forwarder on its own connection (WATCH is per connection); `gate` runs before each queue. */
    const forwarderOn = async (gate: (shard: number) => Promise<void>) => {
      const connection = createRedisConnection(cluster.url, 'producer', silentLogger);
      closers.push(async () => connection.disconnect());
      await whenReady(connection, 5_000);
      const queues = [0, 1].map((shard) => {
        const queue = new Queue<ChangeSlice>(shardQueueName('a', shard), {
          connection,
          prefix: keys.queueTag('a', shard),
        });
        closers.unshift(() => queue.close());
        // The forwarder awaits the queue's client before its WATCH there: the gate holds it.
        const backend = new Proxy(queue.backend, {
          get: (target, prop) =>
            prop === 'client'
              ? gate(shard).then(() => target.client)
              : (Reflect.get(target, prop) as unknown),
        });
        return new Proxy(queue, {
          get: (target, prop) => (prop === 'backend' ? backend : (Reflect.get(target, prop) as unknown)),
        });
      });
      return bareForwarder(connection, keys, (_sink, shard) => queues[shard]!);
    };
    // One page with a slice for each shard of sink a.
    const changes = page(range(1, 10));
    const slices = [0, 1].map((shard) => {
      const mine = changes.filter((c) => shardOf(c, 2) === shard);
      return { sink: 'a', shard, jobId: `j${shard}`, changes: mine };
    });
    await client.rpush(
      outboxKey(keys, 'scheduling'),
      `1 ${JSON.stringify({ id: 'e1', slices: slices.filter((sl) => sl.changes.length) })}`,
    );
    try {
      let thaw!: () => void;
      const thawed = new Promise<void>((resolve) => (thaw = resolve));
      let frozen!: () => void;
      const isFrozen = new Promise<void>((resolve) => (frozen = resolve));
      // Holder 1 forwards to shard 0, then freezes before shard 1.
      const first = await forwarderOn(async (shard) => {
        if (shard === 1) {
          frozen();
          await thawed;
        }
      });
      const old = await fence(config, 1);
      const stuck = first.forward('scheduling', old);
      await isFrozen;
      // Holder 2 takes the lease, forwards the page everywhere and drops it.
      const second = await forwarderOn(async () => undefined);
      const current = await fence(config, 2);
      await expect(second.forward('scheduling', current)).resolves.toBe(1);
      expect(await client.llen(outboxKey(keys, 'scheduling'))).toBe(0);
      // It forwards the next page too (which prunes the first one's marks), and shard 1's slice of
      // the first page is delivered and removed: nothing there says it was ever forwarded.
      const next = page([11, 12, 13, 14, 15, 16, 17]).filter((c) => shardOf(c, 2) === 1);
      const e2 = { id: 'e2', slices: [{ sink: 'a', shard: 1, jobId: 'j2', changes: next }] };
      await client.rpush(outboxKey(keys, 'scheduling'), `2 ${JSON.stringify(e2)}`);
      await expect(second.forward('scheduling', current)).resolves.toBe(1);
      const shard1 = new Queue<ChangeSlice>(shardQueueName('a', 1), {
        connection: client,
        prefix: keys.queueTag('a', 1),
      });
      await shard1.remove('j1');
      await shard1.close();
      // Holder 1 wakes up with the first page in memory: refused at shard 1, adds nothing.
      thaw();
      await expect(stuck).rejects.toBeInstanceOf(LeaseFencedError);
    } finally {
      for (const close of closers) await close();
    }
    const [zero, one] = await queued({ ...config, shards: 2 }, 'a');
    expect(zero!.map((c) => c.event_id)).toEqual(slices[0]!.changes.map((c) => c.event_id));
    expect(
      one!.map((c) => c.event_id),
      'only the second page',
    ).toEqual([11, 12, 13, 14, 15, 16, 17].filter((id) => shardOf(page([id])[0]!, 2) === 1));
  });
});
