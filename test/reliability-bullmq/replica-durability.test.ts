// queue.min_replicas_acked end to end: `poll` starts on a primary that neither snapshots nor
// appends because it has a replica, and `poll` + `work` drain the sandbox with every commit waiting
// for that replica.
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { tempDir } from '../support/harness.js';
import { killAllCli, writeConfig } from '../support/process.js';
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
  waitStarted,
  cliStarter,
} from './support.js';

const seed = testSeed();
const note = seedNote(seed);

describe(`bullmq: queue.min_replicas_acked ${note}`, () => {
  let sandbox: Sandbox;
  let primary: RedisServer;
  let replica: RedisServer;
  const dir = tempDir('feedsync-rb-replica-');

  beforeAll(async () => {
    primary = await startRedis({ snapshots: false });
    replica = await startRedis({ snapshots: false });
    const r = new Redis(replica.url);
    await r.replicaof('127.0.0.1', primary.port);
    r.disconnect();
    const p = new Redis(primary.url);
    await eventually(
      async () => /^slave0:.*state=online/m.test(await p.info('replication')),
      10_000,
      'replica online',
    );
    p.disconnect();
    sandbox = await startSandbox({ seed, backlog: 300 });
  }, 30_000);
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
    await replica?.stop();
    await primary?.stop();
  });

  it(
    'starts without AOF/RDB thanks to the replica and delivers everything',
    { timeout: 90_000 },
    async () => {
      const raw = bullmqConfig(sandbox, dir, primary.url, {
        sinks: [{ name: 'file', type: 'jsonl', path: './changes-${WORKER_ID}.jsonl' }],
        queue: { min_replicas_acked: 1 },
      });
      const configPath = writeConfig(dir, raw);
      const start = cliStarter(configPath);
      const procs = [start('poll', 'poll'), start('work', 'a')];
      await waitStarted(...procs);
      expect(procs[0]!.logs().some((e) => /commits wait for replicas/.test(String(e.msg)))).toBe(true);
      const all = sandboxKeys(sandbox);
      await eventually(
        () => missingKeys(all, readJsonlFiles(dir, 'changes-')).length === 0,
        60_000,
        `every key ${note}`,
      );
      const exits = await stopGracefully(procs, 5_000);
      for (const exit of exits) expect(exit).toMatchObject({ code: 0, signal: null });
    },
  );
});
