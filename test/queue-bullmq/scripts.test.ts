// The scaled mode's Lua scripts run by SHA (scripts.ts), and a Redis that loses its scripts on a
// live connection (SCRIPT FLUSH) costs one retried commit: nothing lost, nothing twice.
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { FeedsyncError } from '../../src/core/errors.js';
import { PipelineEvents } from '../../src/core/events.js';
import { createBullmqDelivery } from '../../src/queue/bullmq/delivery.js';
import { createBullmqProducer, type BullmqProducer } from '../../src/queue/bullmq/producer.js';
import type { PageCommit } from '../../src/queue/queue.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { ANY, RecordingSink, makeChange, queueConfig, range, silentLogger, waitFor } from './support.js';

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

/** Calls of EVAL and EVALSHA the server ran since the last CONFIG RESETSTAT. */
async function scriptCalls(): Promise<{ eval: number; evalsha: number }> {
  const info = await inspector.info('commandstats');
  const calls = (name: string) => Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(info)?.[1] ?? 0);
  return { eval: calls('eval'), evalsha: calls('evalsha') };
}

/** Commits as the poller does: a retryable failure is tried again (bounded). */
async function commit(producer: BullmqProducer, page: PageCommit): Promise<number> {
  let failures = 0;
  for (;;) {
    try {
      await producer.commitPage(page);
      return failures;
    } catch (err) {
      if (!(err instanceof FeedsyncError && err.retryable) || ++failures > 3) throw err;
    }
  }
}

describe('bullmq scripts', () => {
  it('after the first page, commits and deliveries send scripts by SHA', async () => {
    const config = queueConfig(redis.url, { shards: 2 });
    const producer = createBullmqProducer({
      queue: config,
      sinks: [{ name: 'file', filter: ANY }],
      logger: silentLogger,
    });
    cleanups.push(() => producer.close());
    const file = new RecordingSink();
    const runner = createBullmqDelivery({
      queue: config,
      sinks: [{ name: 'file', sink: file }],
      events: new PipelineEvents(),
      logger: silentLogger,
    });
    cleanups.push(() => runner.stop(5_000));
    await runner.start();
    await commit(producer, {
      source: 'scheduling',
      changes: range(1, 10).map((id) => makeChange(id)),
      cursor: 10,
      seenAbove: [],
    });
    await waitFor('the first page delivered', () => file.delivered.length >= 10);

    await inspector.config('RESETSTAT');
    for (let page = 1; page < 6; page++) {
      const ids = range(page * 10 + 1, 10);
      await commit(producer, {
        source: 'scheduling',
        changes: ids.map((id) => makeChange(id)),
        cursor: ids.at(-1)!,
        seenAbove: [],
        from: { cursor: page * 10, seenAbove: [] },
      });
    }
    await waitFor('every page delivered', () => file.delivered.length >= 60);
    // A script's text goes once per connection (one the workers open late sends it once more);
    // sent by text every time, EVAL would outnumber EVALSHA.
    const calls = await scriptCalls();
    expect(calls.evalsha).toBeGreaterThan(20);
    expect(calls.eval).toBeLessThan(calls.evalsha / 10);
  });

  it('SCRIPT FLUSH between commits costs one retried commit: nothing lost, nothing delivered twice', async () => {
    const config = queueConfig(redis.url, { shards: 2 });
    const producer = createBullmqProducer({
      queue: config,
      sinks: [
        { name: 'file', filter: ANY },
        { name: 'hook', filter: ANY },
      ],
      logger: silentLogger,
    });
    cleanups.push(() => producer.close());
    const file = new RecordingSink();
    const hook = new RecordingSink();
    const runner = createBullmqDelivery({
      queue: config,
      sinks: [
        { name: 'file', sink: file },
        { name: 'hook', sink: hook },
      ],
      events: new PipelineEvents(),
      logger: silentLogger,
    });
    cleanups.push(() => runner.stop(5_000));
    await runner.start();

    const pages = 5;
    let retried = 0;
    for (let page = 0; page < pages; page++) {
      const ids = range(page * 20 + 1, 20);
      // Flushed on the live connections of producer and workers alike.
      if (page > 0) await inspector.script('FLUSH');
      retried += await commit(producer, {
        source: 'scheduling',
        changes: ids.map((id) => makeChange(id)),
        cursor: ids.at(-1)!,
        seenAbove: [],
        ...(page > 0 && { from: { cursor: page * 20, seenAbove: [] } }),
      });
      await waitFor(
        `page ${page + 1} delivered to both sinks`,
        () => file.delivered.length >= (page + 1) * 20 && hook.delivered.length >= (page + 1) * 20,
      );
    }
    // Each flush made the next commit fail once (its scripts were gone), and the retry went in.
    expect(retried).toBe(pages - 1);
    await new Promise((r) => setTimeout(r, 300));
    const all = range(1, pages * 20).map((id) => makeChange(id).key);
    for (const sink of [file, hook]) {
      expect(sink.keys()).toHaveLength(all.length);
      expect([...sink.keys()].sort()).toEqual([...all].sort());
    }
    expect(await inspector.hget(`{${config.prefix}}:source:scheduling`, 'cursor')).toBe(String(pages * 20));
    expect(await inspector.hgetall(`{${config.prefix}}:commit-stats`)).toMatchObject({
      pages: String(pages),
    });
    await waitFor('the backlog counted down to 0', async () => {
      const backlog = await inspector.hgetall(`{${config.prefix}}:backlog`);
      return backlog.file === '0' && backlog.hook === '0';
    });
  });
});
