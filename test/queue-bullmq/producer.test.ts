import { Redis } from 'ioredis';
import { Job, Queue, Worker } from 'bullmq';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { PipelineEvents } from '../../src/core/events.js';
import type { Change } from '../../src/core/change.js';
import { buryFailedSlice, openDeadQueue } from '../../src/queue/bullmq/dead-letters.js';
import { createBullmqDelivery } from '../../src/queue/bullmq/delivery.js';
import type { ChangeSlice } from '../../src/queue/bullmq/slice.js';
import type { QueueConfig } from '../../src/config/types.js';
import { createBullmqProducer, type BullmqProducer } from '../../src/queue/bullmq/producer.js';
import { PositionLost, type DeliveryRunner } from '../../src/queue/queue.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import {
  ANY,
  RecordingSink,
  makeChange,
  queueConfig,
  range,
  silentLogger,
  sliceJobs,
  waitFor,
} from './support.js';

let redis: RedisServer;
let inspector: Redis;
const cleanups: (() => Promise<void>)[] = [];

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

function producerFor(
  config: ReturnType<typeof queueConfig>,
  sinks: { name: string; filter?: typeof ANY }[],
): BullmqProducer {
  const producer = createBullmqProducer({
    queue: config,
    sinks: sinks.map((s) => ({ name: s.name, filter: s.filter ?? ANY })),
    logger: silentLogger,
  });
  cleanups.push(() => producer.close());
  return producer;
}

/** A scheduling page of `changes` read after cursor `from`, committed up to `cursor`. */
function commitAfter(producer: BullmqProducer, from: number, changes: Change[], cursor: number) {
  return producer.commitPage({
    source: 'scheduling',
    changes,
    cursor,
    seenAbove: [],
    from: { cursor: from, seenAbove: [] },
  });
}

/** The cursor the producer wrote to Redis for `source` (null: none). */
function cursorIn(config: ReturnType<typeof queueConfig>, source = 'scheduling'): Promise<string | null> {
  return inspector.hget(`{${config.prefix}}:source:${source}`, 'cursor');
}

/** The most changes any sink has queued and not yet delivered (the counters the commits keep). */
async function maxBacklogIn(config: ReturnType<typeof queueConfig>): Promise<number> {
  const counts = Object.values(await inspector.hgetall(`{${config.prefix}}:backlog`)).map(Number);
  return Math.max(0, ...counts);
}

/** Pages and slice jobs committed so far (one count per commit, whatever replays happened). */
async function commitStats(config: ReturnType<typeof queueConfig>): Promise<Record<string, string>> {
  return inspector.hgetall(`{${config.prefix}}:commit-stats`);
}

function deliveryFor(
  config: ReturnType<typeof queueConfig>,
  sinks: { name: string; sink: RecordingSink }[],
): DeliveryRunner {
  const runner = createBullmqDelivery({
    queue: config,
    sinks,
    events: new PipelineEvents(),
    logger: silentLogger,
  });
  cleanups.push(() => runner.stop(5_000));
  return runner;
}

describe('bullmq producer', () => {
  it('queues every change for every sink and saves the cursor in one commit; each reaches its sink once', async () => {
    const config = queueConfig(redis.url);
    const producer = producerFor(config, [{ name: 'file' }, { name: 'hook' }]);
    const changes = range(1, 30).map((id) => makeChange(id));

    const queued = await producer.commitPage({ source: 'scheduling', changes, cursor: 30, seenAbove: [] });
    expect(queued).toEqual({ file: 30, hook: 30 });
    expect(await cursorIn(config)).toBe('30');
    const slices = (await sliceJobs(config, 'file')).length + (await sliceJobs(config, 'hook')).length;
    expect(await commitStats(config)).toEqual({ pages: '1', slices: String(slices), changes: '60' });
    expect(await maxBacklogIn(config)).toBe(30);

    const file = new RecordingSink();
    const hook = new RecordingSink();
    await deliveryFor(config, [
      { name: 'file', sink: file },
      { name: 'hook', sink: hook },
    ]).start();
    await waitFor(
      'both sinks to receive 30 changes',
      () => file.delivered.length >= 30 && hook.delivered.length >= 30,
    );
    await new Promise((r) => setTimeout(r, 200));
    expect([...file.keys()].sort()).toEqual(changes.map((c) => c.key).sort());
    expect([...hook.keys()].sort()).toEqual(changes.map((c) => c.key).sort());
    expect(file.delivered[0]).toEqual(changes.find((c) => c.key === file.delivered[0]!.key));
  });

  it('lays keys out under the {prefix} hash tag, one queue per sink and shard, slice job id = first+last key+digest', async () => {
    const config = queueConfig(redis.url, { shards: 2 });
    const producer = producerFor(config, [{ name: 'hook' }]);
    await producer.commitPage({
      source: 'scheduling',
      changes: [makeChange(123457)],
      cursor: 123457,
      seenAbove: [],
    });
    const keys = await inspector.keys(`*${config.prefix}*`);
    expect(keys.length).toBeGreaterThan(0);
    // Queues, and the source's cursor, the commit counters and the backlog beside them: one hash slot.
    const others = [
      `{${config.prefix}}:source:scheduling`,
      `{${config.prefix}}:commit-stats`,
      `{${config.prefix}}:backlog`,
    ];
    for (const key of keys)
      expect(key.startsWith(`{${config.prefix}}:hook.`) || others.includes(key), key).toBe(true);
    expect(keys).toEqual(expect.arrayContaining(others));
    const jobKeys = keys.filter((k) => /:scheduling~123457\+scheduling~123457\+[0-9a-f]{12}$/.test(k));
    expect(jobKeys).toHaveLength(1);
    expect(jobKeys[0]).toMatch(
      new RegExp(`^\\{${config.prefix}\\}:hook\\.[01]:scheduling~123457\\+scheduling~123457\\+[0-9a-f]{12}$`),
    );
    const [job] = await sliceJobs(config, 'hook');
    expect(job!.changes.map((c) => c.key)).toEqual(['scheduling:123457']);
  });

  it('a catch-up commit tried again after it landed, read after a stale position, or against a stale shared cursor, is refused', async () => {
    const config = queueConfig(redis.url, { shards: 2 });
    const producer = producerFor(config, [{ name: 'file' }]);
    const tag = `{${config.prefix}}`;
    // `file` is off the shared stream of `scheduling`, at event 0, generation 3; the shared stream
    // is at event 10.
    await inspector.hset(`${tag}:source:scheduling`, 'cursor', '10', 'seen_above', '[]');
    await inspector.hset(`${tag}:sinks:scheduling`, 'file', '3');
    const entry = { cursor: 0, seenAbove: [], reason: 'parked', since: 1, eventAt: 1 };
    await inspector.hset(`${tag}:lagging:scheduling`, 'file', JSON.stringify(entry));
    const page = {
      source: 'scheduling',
      sink: 'file',
      generation: 3,
      reason: 'parked' as const,
      since: 1,
      changes: range(1, 5).map((id) => makeChange(id)),
      cursor: 5,
      seenAbove: [],
      eventIds: range(1, 5),
      eventAt: 1,
      join: false,
      from: { cursor: 0, seenAbove: [] },
      shared: { cursor: 10, seenAbove: [] },
    };
    expect(await producer.commitCatchUp(page)).toEqual({ queued: 5, lost: [] });
    // The same commit again (its answer was lost to a timeout, say): its position moved, refused.
    await expect(producer.commitCatchUp(page)).rejects.toThrow(/position moved/);
    const ids = async () =>
      (await sliceJobs(config, 'file')).flatMap((j) => j.changes.map((c) => c.event_id));
    expect((await ids()).sort((a, b) => a - b)).toEqual(range(1, 5));
    expect(await inspector.hget(`${tag}:backlog`, 'file')).toBe('5');
    // Read after position 0, which the sink has left: refused, nothing queued.
    await expect(
      producer.commitCatchUp({ ...page, changes: range(1, 8).map((id) => makeChange(id)), cursor: 8 }),
    ).rejects.toThrow(/position moved/);
    expect(await ids()).toHaveLength(5);
    expect(JSON.parse((await inspector.hget(`${tag}:lagging:scheduling`, 'file'))!)).toMatchObject({
      cursor: 5,
    });
    // Read while the poller thought the shared stream at 8, though a commit it gave up on landed:
    // the events from 9 on were told apart wrongly (neither queued here nor by the shared stream).
    await expect(
      producer.commitCatchUp({
        ...page,
        changes: range(6, 3).map((id) => makeChange(id)),
        cursor: 8,
        eventIds: range(6, 3),
        from: { cursor: 5, seenAbove: [] },
        shared: { cursor: 8, seenAbove: [] },
      }),
    ).rejects.toThrow(/source's cursor is at 10/);
    expect(await ids()).toHaveLength(5);
  });

  it('a page Redis refuses for memory writes nothing; once memory frees, it is queued exactly once', async () => {
    const config = queueConfig(redis.url, { shards: 4 });
    const producer = producerFor(config, [{ name: 'file' }, { name: 'hook' }]);
    // First a page that goes through: connections open, scripts loaded.
    await producer.commitPage({ source: 'scheduling', changes: [makeChange(1)], cursor: 1, seenAbove: [] });
    const changes = range(2, 40).map((id) => makeChange(id, { subject: `s${id % 12}` }));
    await inspector.config('SET', 'maxmemory-policy', 'noeviction');
    await inspector.config('SET', 'maxmemory', '1');
    try {
      await expect(
        producer.commitPage({ source: 'scheduling', changes, cursor: 41, seenAbove: [] }),
      ).rejects.toThrow(/OOM|maxmemory|EXECABORT/);
    } finally {
      await inspector.config('SET', 'maxmemory', '0');
    }
    // Refused whole: not one of its slices, the cursor and the counts where they were.
    for (const sink of ['file', 'hook'])
      expect((await sliceJobs(config, sink)).flatMap((j) => j.changes.map((c) => c.event_id))).toEqual([1]);
    expect(await cursorIn(config)).toBe('1');
    expect(await inspector.hgetall(`{${config.prefix}}:backlog`)).toEqual({ file: '1', hook: '1' });
    await producer.commitPage({ source: 'scheduling', changes, cursor: 41, seenAbove: [] });
    for (const sink of ['file', 'hook']) {
      const ids = (await sliceJobs(config, sink)).flatMap((j) => j.changes.map((c) => c.event_id));
      expect(ids.sort((a, b) => a - b)).toEqual(range(1, 41));
    }
    expect(await cursorIn(config)).toBe('41');
    expect(await inspector.hgetall(`{${config.prefix}}:backlog`)).toEqual({ file: '41', hook: '41' });
  });

  it('makes at most one job per shard and sink for a page, in feed order; a late try of the same commit adds nothing', async () => {
    const config = queueConfig(redis.url, { shards: 4 });
    const producer = producerFor(config, [{ name: 'file' }, { name: 'hook' }]);
    // 40 changes of 12 subjects: several per subject, spread over the 4 shards.
    const changes = range(1, 40).map((id) => makeChange(id, { subject: `s${id % 12}` }));
    await producer.commitPage({ source: 'scheduling', changes, cursor: 40, seenAbove: [] });
    for (const sink of ['file', 'hook']) {
      const jobs = await sliceJobs(config, sink);
      expect(jobs.length).toBeGreaterThan(1);
      expect(jobs.length).toBeLessThanOrEqual(4);
      expect(new Set(jobs.map((j) => j.queue)).size).toBe(jobs.length);
      // Every change exactly once, each slice in feed order.
      expect(jobs.flatMap((j) => j.changes.map((c) => c.event_id)).sort((a, b) => a - b)).toEqual(
        range(1, 40),
      );
      for (const job of jobs) {
        const ids = job.changes.map((c) => c.event_id);
        expect(ids).toEqual([...ids].sort((a, b) => a - b));
      }
    }
    const before = (await sliceJobs(config, 'file')).map((j) => j.id).sort();
    await producer.commitPage({ source: 'scheduling', changes, cursor: 40, seenAbove: [] });
    expect((await sliceJobs(config, 'file')).map((j) => j.id).sort()).toEqual(before);
    // Read again after a rewind (the cursor moved back, then past them): queued again, as new jobs.
    await producer.commitPage({ source: 'scheduling', changes, cursor: 41, seenAbove: [] });
    const after = await sliceJobs(config, 'file');
    expect(after).toHaveLength(2 * before.length);
    expect(after.filter((j) => before.includes(j.id))).toHaveLength(before.length);
  });

  it('counts the backlog in changes, exactly, whatever the slices (no worker running)', async () => {
    const config = queueConfig(redis.url, { shards: 4 });
    const producer = producerFor(config, [
      { name: 'all' },
      { name: 'rules', filter: { ...ANY, resource_types: ['rule'] } },
    ]);
    expect(await maxBacklogIn(config)).toBe(0);
    let queuedChanges = 0;
    for (let page = 0; page < 3; page++) {
      const changes = range(page * 50 + 1, 50).map((id) =>
        makeChange(id, {
          subject: `s${id % 17}`,
          eventType: id % 10 === 0 ? 'rule_updated' : 'title_updated',
        }),
      );
      await producer.commitPage({ source: 'scheduling', changes, cursor: page * 50 + 50, seenAbove: [] });
      queuedChanges += changes.length;
      await new Promise((r) => setTimeout(r, 1_050)); // past the answer cache
      const jobs = (await sliceJobs(config, 'all', ['wait'])).length;
      expect(jobs).toBeLessThan(queuedChanges);
      expect(await maxBacklogIn(config)).toBe(queuedChanges);
    }
  });
  /** One page of 10 changes committed, its slice taken by a worker and failed by BullMQ. */
  async function failedSlice(config: QueueConfig) {
    const producer = producerFor(config, [{ name: 'file' }]);
    await producer.commitPage({
      source: 'scheduling',
      changes: range(1, 10).map((id) => makeChange(id)),
      cursor: 10,
      seenAbove: [],
    });
    const connection = new Redis(redis.url, { maxRetriesPerRequest: null });
    const prefix = `{${config.prefix}}`;
    const shard = new Queue<ChangeSlice>('file.0', { connection, prefix });
    const dead = openDeadQueue('file', connection, prefix, silentLogger);
    // BullMQ's manual processing: the job active under a lock token, then failed.
    const worker = new Worker<ChangeSlice>('file.0', null, { connection, prefix, autorun: false });
    cleanups.push(async () => {
      await worker.close();
      await shard.close();
      await dead.close();
      connection.disconnect();
    });
    const job = (await worker.getNextJob('lock-1'))!;
    return { shard, dead, job, fail: () => job.moveToFailed(new Error('boom'), 'lock-1') };
  }

  it('a buried slice leaves the backlog once, even when its burial is done again after a crash', async () => {
    const config = queueConfig(redis.url, { shards: 1 });
    const backlog = `{${config.prefix}}:backlog`;
    const { shard, dead, job, fail } = await failedSlice(config);
    await fail();
    expect(await inspector.hget(backlog, 'file')).toBe('10');
    // The first burial dies after counting, before the job is removed; the next look buries it again.
    vi.spyOn(Job.prototype, 'remove').mockRejectedValueOnce(new Error('killed'));
    await expect(buryFailedSlice(job, dead, shard)).rejects.toThrow('killed');
    expect(await inspector.hget(backlog, 'file')).toBe('0');
    await buryFailedSlice(job, dead, shard);
    expect(await inspector.hget(backlog, 'file'), 'counted out once').toBe('0');
    expect(await shard.getJob(job.id!), 'the slice is gone').toBeUndefined();
    expect(await dead.count(), 'every change a dead letter once').toBe(10);
  });

  it('a failed slice buries only what Redis records as undelivered, whatever the failing worker held', async () => {
    const config = queueConfig(redis.url, { shards: 1 });
    const backlog = `{${config.prefix}}:backlog`;
    const { shard, dead, job, fail } = await failedSlice(config);
    // Six changes delivered after the worker fetched the job: recorded (and counted out) the way
    // the progress script does, in Redis only; the worker's Job still says none.
    await inspector.hset(shard.toKey(job.id!), 'progress', JSON.stringify({ done: 6, attempts: 0 }));
    await inspector.hincrby(backlog, 'file', -6);
    await fail();
    expect(job.progress, "the failing worker's view").toBe(0);
    const buried = await buryFailedSlice(job, dead, shard);
    expect(buried.map((c) => c.event_id)).toEqual([7, 8, 9, 10]);
    expect(await dead.count()).toBe(4);
    expect(await inspector.hget(backlog, 'file'), 'nothing counted out twice').toBe('0');
  });

  it('a slice that is not failed (BullMQ will run it again) is not buried', async () => {
    const config = queueConfig(redis.url, { shards: 1 });
    const { shard, dead, job } = await failedSlice(config);
    expect(await buryFailedSlice(job, dead, shard)).toEqual([]);
    expect(await dead.count()).toBe(0);
    expect(await shard.getJob(job.id!)).toBeDefined();
  });

  it('re-adding the same page (crash replay) creates no duplicate job and no duplicate delivery', async () => {
    const config = queueConfig(redis.url);
    const producer = producerFor(config, [{ name: 'file' }]);
    const changes = range(100, 20).map((id) => makeChange(id));
    await producer.commitPage({ source: 'scheduling', changes, cursor: 119, seenAbove: [] });
    await producer.commitPage({ source: 'scheduling', changes, cursor: 119, seenAbove: [] });
    expect(await maxBacklogIn(config)).toBe(20);

    const file = new RecordingSink();
    await deliveryFor(config, [{ name: 'file', sink: file }]).start();
    await waitFor('20 deliveries', () => file.delivered.length >= 20);
    // Replaying after delivery is also a no-op while completed jobs are retained.
    await producer.commitPage({ source: 'scheduling', changes, cursor: 119, seenAbove: [] });
    await new Promise((r) => setTimeout(r, 300));
    expect(file.keys()).toHaveLength(20);
    expect(new Set(file.keys()).size).toBe(20);
    expect(await cursorIn(config)).toBe('119');
    // The replays found their cursor in Redis already: the page counts once, its slice once.
    const slices = (await sliceJobs(config, 'file')).length;
    expect(await commitStats(config)).toEqual({ pages: '1', slices: String(slices), changes: '20' });
  });

  it('a late try finds its commit landed whatever order or spelling Redis holds its seen ids in', async () => {
    const config = queueConfig(redis.url);
    const producer = producerFor(config, [{ name: 'file' }]);
    const changes = range(100, 10).map((id) => makeChange(id));
    const page = { source: 'scheduling', changes, cursor: 109, seenAbove: [125, 122] };
    await producer.commitPage({ ...page, from: { cursor: 0, seenAbove: [] } });
    // The same set of ids, written by another writer (an earlier release, an operator's tool).
    await inspector.hset(`{${config.prefix}}:source:scheduling`, 'seen_above', '[122, 125]');
    // The try the caller gave up on is sent again, from where it was read: it counts as landed,
    // rather than as a cursor that moved away from under it.
    await producer.commitPage({ ...page, from: { cursor: 0, seenAbove: [] } });
    const slices = (await sliceJobs(config, 'file')).length;
    expect(await commitStats(config)).toEqual({ pages: '1', slices: String(slices), changes: '10' });
    expect(await maxBacklogIn(config)).toBe(10);
  });

  it("queues the feed audit's late events, committed at the position the source already holds", async () => {
    const config = queueConfig(redis.url);
    const producer = producerFor(config, [{ name: 'file' }]);
    const at = { cursor: 50, seenAbove: [] };
    const onTime = range(1, 50)
      .filter((id) => id !== 36)
      .map((id) => makeChange(id));
    await producer.commitPage({
      source: 'scheduling',
      changes: onTime,
      ...at,
      from: { cursor: 0, seenAbove: [] },
    });
    // The audit found 36, which the cursor rule had passed over: it is queued without moving the cursor.
    const late = await producer.commitPage({
      source: 'scheduling',
      changes: [makeChange(36)],
      ...at,
      from: at,
    });
    expect(late).toEqual({ file: 1 });
    const queuedIds = (await sliceJobs(config, 'file')).flatMap((j) => j.changes).map((c) => c.event_id);
    expect(queuedIds.sort((a, b) => a - b)).toEqual(range(1, 50));
    expect(await maxBacklogIn(config)).toBe(50);
    expect(await cursorIn(config)).toBe('50');
  });

  it('refuses a page that does not follow the stored cursor (Redis forgot commits), writing nothing', async () => {
    const config = queueConfig(redis.url);
    const producer = producerFor(config, [{ name: 's' }]);
    const first = range(1, 10).map((id) => makeChange(id));
    await producer.commitPage({ source: 'scheduling', changes: first, cursor: 10, seenAbove: [] });
    const second = range(11, 10).map((id) => makeChange(id));
    // Redis came back without the first commit's cursor (a host crash before fsync, say).
    await inspector.hset(`{${config.prefix}}:source:scheduling`, 'cursor', '0');
    await expect(commitAfter(producer, 10, second, 20)).rejects.toBeInstanceOf(PositionLost);
    expect(await cursorIn(config)).toBe('0');
    const queuedIds = (await sliceJobs(config, 's')).flatMap((j) => j.changes).map((c) => c.event_id);
    expect(queuedIds.sort((a, b) => a - b)).toEqual(range(1, 10));
    // Read again from the stored cursor, both pages go in.
    await commitAfter(producer, 0, [...first, ...second], 20);
    expect(await cursorIn(config)).toBe('20');
  });

  it('refuses a page when Redis lost the source state whole after it had one, and takes the page read again from the start', async () => {
    const config = queueConfig(redis.url);
    const producer = producerFor(config, [{ name: 's' }]);
    const first = range(1, 10).map((id) => makeChange(id));
    // A fresh source's first commit finds no state: that is no loss.
    await commitAfter(producer, 0, first, 10);
    // Redis came back without anything of the source (its first commit was in the cut AOF tail),
    // and without the jobs of that commit.
    const keys = await inspector.keys(`{${config.prefix}}*`);
    expect(keys).toContain(`{${config.prefix}}:source:scheduling`);
    await inspector.del(...keys);
    const second = range(11, 10).map((id) => makeChange(id));
    await expect(commitAfter(producer, 10, second, 20)).rejects.toThrow(/the stored cursor is gone, not 10/);
    expect(await cursorIn(config)).toBeNull();
    expect(await sliceJobs(config, 's')).toEqual([]);
    // The poller reads its start position again (none stored: start_from) and both pages go in.
    await commitAfter(producer, 0, [...first, ...second], 20);
    expect(await cursorIn(config)).toBe('20');
    const queuedIds = (await sliceJobs(config, 's')).flatMap((j) => j.changes).map((c) => c.event_id);
    expect(queuedIds.sort((a, b) => a - b)).toEqual(range(1, 20));
  });

  it('routes only the changes that pass each sink filter', async () => {
    const config = queueConfig(redis.url);
    const producer = producerFor(config, [
      { name: 'titles', filter: { ...ANY, event_types: ['title_updated'] } },
      { name: 'rules', filter: { ...ANY, resource_types: ['rule'] } },
      { name: 'other-source', filter: { ...ANY, sources: ['workflow'] } },
    ]);
    const changes = [
      makeChange(1),
      makeChange(2, { eventType: 'rule_created' }),
      makeChange(3),
      makeChange(4, { eventType: 'rule_deleted' }),
    ];
    const queued = await producer.commitPage({ source: 'scheduling', changes, cursor: 4, seenAbove: [] });
    expect(queued).toEqual({ titles: 2, rules: 2, 'other-source': 0 });

    const titles = new RecordingSink();
    const rules = new RecordingSink();
    const other = new RecordingSink();
    await deliveryFor(config, [
      { name: 'titles', sink: titles },
      { name: 'rules', sink: rules },
      { name: 'other-source', sink: other },
    ]).start();
    await waitFor('routed deliveries', () => titles.delivered.length >= 2 && rules.delivered.length >= 2);
    await new Promise((r) => setTimeout(r, 200));
    expect(titles.keys().sort()).toEqual(['scheduling:1', 'scheduling:3']);
    expect(rules.keys().sort()).toEqual(['scheduling:2', 'scheduling:4']);
    expect(other.keys()).toEqual([]);
  });

  it('keeps feed order inside a shard (shards: 1 gives the whole feed order)', async () => {
    // Any concurrency: a shard is delivered one slice, one change or batch at a time.
    const config = queueConfig(redis.url, { shards: 1, concurrency: 4 });
    const producer = producerFor(config, [{ name: 'file' }]);
    // Each subject's changes together: a shard of several (slice.ts inRounds) would reorder them.
    const changes = range(1, 25).map((id) => makeChange(id, { subject: `s${Math.floor(id / 5)}` }));
    await producer.commitPage({
      source: 'scheduling',
      changes: changes.slice(0, 10),
      cursor: 10,
      seenAbove: [],
    });
    await producer.commitPage({
      source: 'scheduling',
      changes: changes.slice(10),
      cursor: 25,
      seenAbove: [],
    });
    const file = new RecordingSink();
    await deliveryFor(config, [{ name: 'file', sink: file }]).start();
    await waitFor('25 deliveries', () => file.delivered.length >= 25);
    expect(file.keys()).toEqual(changes.map((c) => c.key));
  });

  it('rejects and does not save the cursor while Redis is down', async () => {
    const own = await startRedis();
    try {
      const config = queueConfig(own.url);
      const producer = producerFor(config, [{ name: 'file' }]);
      await producer.commitPage({ source: 'scheduling', changes: [makeChange(1)], cursor: 1, seenAbove: [] });
      const reader = new Redis(own.url);
      expect(await reader.hget(`{${config.prefix}}:source:scheduling`, 'cursor')).toBe('1');
      reader.disconnect();

      await own.stop();
      const started = Date.now();
      await expect(
        producer.commitPage({
          source: 'scheduling',
          changes: [makeChange(2), makeChange(3)],
          cursor: 3,
          seenAbove: [],
        }),
      ).rejects.toThrow(/cannot queue page of source scheduling/);
      // Fails fast (no offline buffering); cursor and jobs are one transaction, so neither moved.
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      await own.stop();
    }
  });

  it('rejects promptly when Redis is unreachable from the start', async () => {
    const down = await startRedis();
    await down.stop();
    const producer = createBullmqProducer({
      queue: queueConfig(down.url),
      sinks: [{ name: 'file', filter: ANY }],
      logger: silentLogger,
      addTimeoutMs: 1_000,
    });
    cleanups.push(() => producer.close());
    const started = Date.now();
    await expect(
      producer.commitPage({ source: 'scheduling', changes: [makeChange(1)], cursor: 1, seenAbove: [] }),
    ).rejects.toThrow(/cannot queue page of source scheduling.*no answer from redis within 1000 ms/);
    expect(Date.now() - started).toBeLessThan(3_000);
  });

  it('does not save the cursor when one add of the page fails (error names the source)', async () => {
    const config = queueConfig(redis.url, { shards: 1 });
    const producer = producerFor(config, [{ name: 'file' }, { name: 'hook' }]);
    // Redis refuses adds to hook's shard: its job counter holds a non-integer (INCR fails).
    await inspector.set(`{${config.prefix}}:hook.0:id`, 'not a number');
    await expect(
      producer.commitPage({
        source: 'scheduling',
        changes: [makeChange(4), makeChange(5)],
        cursor: 5,
        seenAbove: [],
      }),
    ).rejects.toThrow(/cannot queue page of source scheduling \(cursor 5\)/);
    // MULTI does not roll back the add that did succeed, but the cursor script refuses to move.
    expect(await cursorIn(config)).toBeNull();
    expect(await commitStats(config)).toEqual({});
  });
});

describe('bullmq producer: the source lease as the commit finds it', () => {
  const setup = async (lease: string | null, counter: string, ttlMs = 10_000) => {
    const config = queueConfig(redis.url);
    const tokenKey = `{${config.prefix}}:lease-token:scheduling`;
    const leaseKey = `{${config.prefix}}:lease:scheduling`;
    await inspector.set(tokenKey, counter);
    if (lease !== null) await inspector.set(leaseKey, lease, 'PX', ttlMs);
    const fence = { tokenKey, leaseKey, token: 7, value: '7 me', ttlMs: 5_000 };
    const producer = createBullmqProducer({
      queue: config,
      sinks: [{ name: 'file', filter: ANY }],
      logger: silentLogger,
      leases: { fence: () => fence, markLost: () => undefined },
    });
    cleanups.push(() => producer.close());
    const page = { source: 'scheduling', changes: [makeChange(1), makeChange(2)], cursor: 2, seenAbove: [] };
    return { config, tokenKey, leaseKey, producer, page };
  };

  /** Queues the page's job adds on the MULTI only after `ms`, running `meanwhile` first. */
  const slowAdds = (ms: number, meanwhile: () => Promise<unknown> = async () => undefined) => {
    const addJob = Job.prototype.addJob;
    let ran = false;
    const spy = vi.spyOn(Job.prototype, 'addJob').mockImplementation(async function (this: Job, ...args) {
      if (!ran) {
        ran = true;
        await meanwhile();
      }
      await new Promise((r) => setTimeout(r, ms));
      return addJob.apply(this, args as Parameters<typeof addJob>);
    });
    cleanups.push(async () => spy.mockRestore());
  };

  it('a lease that runs out mid-commit with nobody taking it: the commit restores it and goes in whole', async () => {
    const { config, leaseKey, producer, page } = await setup('7 me', '7', 400);
    // The lease, valid when the commit checked it, has expired by EXEC (Redis frozen mid-commit).
    slowAdds(600);
    await producer.commitPage(page);
    const jobs = await sliceJobs(config, 'file', ['wait', 'active', 'completed']);
    expect(
      jobs
        .flatMap((j) => j.changes)
        .map((c) => c.event_id)
        .sort(),
    ).toEqual([1, 2]);
    expect(await cursorIn(config)).toBe('2');
    expect(await commitStats(config)).toEqual({ pages: '1', slices: String(jobs.length), changes: '2' });
    expect(await inspector.get(leaseKey)).toBe('7 me');
    expect(await inspector.pttl(leaseKey)).toBeGreaterThan(4_000);
  });

  it('a lease another process took mid-commit lets none of the page in, and says so', async () => {
    const { config, leaseKey, tokenKey, producer, page } = await setup('7 me', '7');
    slowAdds(300, async () => {
      await inspector.set(tokenKey, '8');
      await inspector.set(leaseKey, '8 other', 'PX', 10_000);
    });
    await expect(producer.commitPage(page)).rejects.toThrow(/lease is held under token 8/);
    expect(await sliceJobs(config, 'file', ['wait', 'active', 'completed'])).toHaveLength(0);
    expect(await cursorIn(config)).toBeNull();
    expect(await inspector.get(leaseKey)).toBe('8 other');
  });

  it('a lease Redis forgot, or shows from before it, is restored by the commit unless a newer token was handed out', async () => {
    // Redis lost its last second of writes: it shows the previous holder's lease and counter.
    const rolledBack = await setup('5 before', '5');
    await rolledBack.producer.commitPage(rolledBack.page);
    expect(await cursorIn(rolledBack.config)).toBe('2');
    expect(await inspector.get(rolledBack.leaseKey)).toBe('7 me');
    expect(await inspector.get(rolledBack.tokenKey)).toBe('7');
    await inspector.flushall();
    // ... or no lease at all.
    const forgotten = await setup(null, '0');
    await forgotten.producer.commitPage(forgotten.page);
    expect(await cursorIn(forgotten.config)).toBe('2');
    expect(await inspector.get(forgotten.leaseKey)).toBe('7 me');
    await inspector.flushall();
    // A token above ours was handed out since: never restored, nothing written.
    const newer = await setup(null, '9');
    await expect(newer.producer.commitPage(newer.page)).rejects.toThrow(/token 9 was handed out after ours/);
    expect(await cursorIn(newer.config)).toBeNull();
    expect(await inspector.get(newer.leaseKey)).toBeNull();
  });
});
