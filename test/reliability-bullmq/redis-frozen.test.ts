// Redis frozen, not dead, for the lease holder: its connection stays open but nothing comes back
// (a stopped Redis, a network that drops packets without a reset). Its renewals hang without an
// error, the lease expires in Redis, and a standby takes the source. Before the self-expiry by the
// monotonic clock, the frozen holder went on believing it held the source: two replicas reported
// feedsync_source_leader 1 and polled upstream at once. Now the holder gives the source up before
// the lease can expire, so its "lost" always comes before the standby's "acquired".
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { tempDir } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig } from '../support/process.js';
import { redisGate } from '../support/redis-gate.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import {
  bullmqConfig,
  eventually,
  missingKeys,
  readJsonlFiles,
  sandboxKeys,
  seedNote,
  stopGracefully,
  testSeed,
} from './support.js';

const TTL_MS = 3_000;
const seed = testSeed();
const note = seedNote(seed);
const acquired = (e: { msg?: string }) => e.msg === 'acquired the lease of source scheduling';
const lost = (e: { msg?: string }) => e.msg === 'lost the lease of source scheduling; its poller stops';

describe(`bullmq: redis hangs for the lease holder ${note}`, () => {
  let sandbox: Sandbox;
  let redis: RedisServer;
  const dir = tempDir('feedsync-rb-hang-');

  beforeAll(async () => {
    redis = await startRedis();
    sandbox = await startSandbox({ seed, backlog: 100, rate: 10 });
  });
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
    await redis?.stop();
  });

  it(
    'the holder gives the source up before the standby takes it; nothing is lost',
    { timeout: 90_000 },
    async () => {
      const proxy = await redisGate(redis.port);
      const base = bullmqConfig(sandbox, dir, redis.url, {
        services: ['scheduling'],
        shutdownTimeoutMs: 5000,
        queue: { lease_ttl_ms: TTL_MS },
        sinks: [{ name: 'file', type: 'jsonl', path: './changes.jsonl' }],
      });
      // One config (one queue prefix); only the holder reaches Redis through the proxy.
      const raw = (url: string) => ({ ...base, queue: { ...(base.queue as object), redis_url: url } });
      const holder = spawnCli(['poll'], { config: writeConfig(dir, raw(proxy.url), 'holder.yaml') });
      await holder.waitForLog(acquired, 20_000, 'the holder to take scheduling');
      const standby = spawnCli(['poll'], { config: writeConfig(dir, raw(redis.url), 'standby.yaml') });
      const worker = spawnCli(['work'], { config: writeConfig(dir, raw(redis.url), 'work.yaml') });
      await standby
        .waitForLog((e) => /^waiting for source scheduling held by /.test(e.msg ?? ''), 20_000)
        .catch((err: Error) => {
          throw new Error(`${err.message}\n${standby.text().slice(-3000)}`);
        });

      proxy.hang();
      const takeover = await standby.waitForLog(acquired, TTL_MS + 10_000, 'the standby to take over');
      const gaveUp = await holder.waitForLog(lost, 1_000, 'the holder to give the source up');
      // The holder stopped by its own clock before the lease expired and the standby took it.
      expect(
        Number(gaveUp.time),
        `holder gave up at ${String(gaveUp.time)}, standby took at ${String(takeover.time)} ${note}`,
      ).toBeLessThan(Number(takeover.time));
      proxy.resume();

      sandbox.setRate(0);
      const expected = sandboxKeys(sandbox, ['scheduling']);
      await eventually(
        () => missingKeys(expected, readJsonlFiles(dir, 'changes')).length === 0,
        45_000,
        `every scheduling key delivered ${note}`,
      );
      await stopGracefully([holder, standby, worker], 5000);
      await proxy.close();
    },
  );
});
