// A shard handed over while the worker serving it cannot reconnect its blocking connection (the
// moment of a failover). BullMQ's Worker.close() never settles then (taskforcesh/bullmq#4656): a
// hand-over that waited for it kept the shard from the joining process until the lease expired,
// and a stop that waited for it overran its budget and exited 1. The hand-over waits for the slice
// in flight only, and a stop ends within its budget.
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { tempDir } from '../support/harness.js';
import { killAllCli, writeConfig } from '../support/process.js';
import { redisGate, type RedisGate } from '../support/redis-gate.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { bullmqConfig, cliStarter, seedNote, stopGracefully, testSeed, waitStarted } from './support.js';

const TTL_MS = 10_000;
const SHUTDOWN_MS = 3_000;
const seed = testSeed();
const note = seedNote(seed);

describe(`bullmq: a shard handed over while its worker cannot reconnect ${note}`, () => {
  let sandbox: Sandbox;
  let redis: RedisServer;
  let admin: Redis;
  let proxy: RedisGate;
  const dir = tempDir('feedsync-rb-hand-over-');

  beforeAll(async () => {
    redis = await startRedis();
    admin = new Redis(redis.url);
    proxy = await redisGate(redis.port);
    sandbox = await startSandbox({ seed, backlog: 20 });
  });
  afterAll(async () => {
    await killAllCli();
    admin?.disconnect();
    await proxy?.close();
    await sandbox?.close();
    await redis?.stop();
  });

  it(
    'goes to the joining process at once, and the old one still stops in time',
    { timeout: 60_000 },
    async () => {
      const options = {
        shutdownTimeoutMs: SHUTDOWN_MS,
        queue: { shards: 2, lease_ttl_ms: TTL_MS },
        sinks: [{ name: 'file', type: 'jsonl', path: './changes-${WORKER_ID}.jsonl' }],
      };
      const raw = bullmqConfig(sandbox, dir, proxy.url, options);
      const viaGate = cliStarter(writeConfig(dir, raw, 'a.yaml'));
      const queue = raw.queue as Record<string, unknown>;
      const direct = cliStarter(
        writeConfig(dir, { ...raw, queue: { ...queue, redis_url: redis.url } }, 'b.yaml'),
      );
      const acquired = (e: { msg?: string }) => e.msg?.startsWith('acquired the lease of shard') ?? false;

      const a = viaGate('work', 'a');
      await waitStarted(a);
      await a.waitForLog(acquired, 10_000, 'a holding a shard');
      await expect.poll(() => a.logs().filter(acquired).length, { timeout: 10_000 }).toBe(2);

      // Only a's blocking connections go (BullMQ's BZPOPMIN waiters): they cannot come back through
      // the gate, while its lease and command connections stay up.
      proxy.refuse();
      // A blocking connection that has not blocked yet has only run the ready check (INFO); one
      // that had not connected when the gate closed is refused already. Looked for until none has
      // shown for a second.
      let killed = 0;
      let quietSince = Date.now();
      for (const deadline = Date.now() + 10_000; Date.now() < deadline;) {
        for (const line of String(await admin.client('LIST')).split('\n')) {
          const addr = / addr=(\S+) /.exec(line)?.[1];
          const id = /^id=(\d+) /.exec(line)?.[1];
          if (/ cmd=(bzpopmin|info) /.test(line) && addr && id && proxy.through(addr)) {
            killed += Number(await admin.client('KILL', 'ID', id));
            quietSince = Date.now();
          }
        }
        if (killed > 0 && Date.now() - quietSince >= 1_000) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      expect(
        killed,
        `a's blocking connections killed ${note}; clients:\n${String(await admin.client('LIST'))}`,
      ).toBeGreaterThanOrEqual(1);

      const b = direct('work', 'b');
      await waitStarted(b);
      const joined = Date.now();
      await b.waitForLog(acquired, TTL_MS / 2, `b given its share well before a's lease expires ${note}`);
      expect(Date.now() - joined).toBeLessThan(TTL_MS / 2);
      expect(
        a.logs().some((e) => e.msg?.startsWith('handing shard')),
        `a handed a shard over ${note}`,
      ).toBe(true);

      const [exitA] = await stopGracefully([a], SHUTDOWN_MS);
      expect(exitA, `a's graceful stop ${note}:\n${a.text().slice(-4_000)}`).toMatchObject({
        code: 0,
        signal: null,
      });
      await stopGracefully([b], SHUTDOWN_MS);
    },
  );
});
