// A Redis Cluster without replicas, each primary persisting with AOF (appendfsync everysec, the
// default): a host crash loses the writes of a primary's last second or so (not yet fsynced). The
// harness models it: SIGKILL, the AOF's last 256 KB cut off, the node started again in place.
// Mid-drain, under live traffic, the primary of the scheduling source is restarted that way, then
// that of the workflow source (each holds its source's state and shard queues). A primary loses its
// source's last commits, queued slices and cursor together: those pages are read again. The
// scheduling primary is then restarted once more, which makes Redis 7.0 replay the front of a
// transaction its first load found cut. Nothing may be lost; copies are allowed (a Redis that
// forgets is a crash), and reported; the backlog counters end exact.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisConnection } from '../../src/queue/bullmq/redis.js';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { tempDir } from '../support/harness.js';
import { killAllCli, writeConfig } from '../support/process.js';
import { startRedisCluster, type RedisClusterSet } from '../support/redis-cluster.js';
import {
  bullmqConfig,
  eventually,
  expectClusterBacklogDrained,
  missingKeys,
  progressTrace,
  queuePrefix,
  readJsonlFiles,
  sandboxKeys,
  seedNote,
  stopGracefully,
  testSeed,
  cliStarter,
} from './support.js';

const BACKLOG = Number(process.env.RB_BACKLOG ?? 3000);
const SHUTDOWN_MS = 5000;
/** About a second of this test's writes to one primary. */
const LOST_BYTES = 256 * 1024;
const SHARDS = 2;
const seed = testSeed();
const note = seedNote(seed);

describe(`bullmq: redis cluster primaries restarted in place from their AOF mid-drain ${note}`, () => {
  let sandbox: Sandbox;
  let cluster: RedisClusterSet;
  const dir = tempDir('feedsync-rb-cluster-restart-');

  beforeAll(async () => {
    cluster = await startRedisCluster({ password: 'restart-pw', replicasPerPrimary: 0 });
    sandbox = await startSandbox({ seed, backlog: BACKLOG });
  }, 60_000);
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
    await cluster?.stop();
  });

  it('loses nothing when the primaries of both sources restart in place', { timeout: 180_000 }, async () => {
    const raw = bullmqConfig(sandbox, dir, cluster.url, {
      shutdownTimeoutMs: SHUTDOWN_MS,
      queue: { shards: SHARDS },
      sinks: [{ name: 'file', type: 'jsonl', path: './changes-${WORKER_ID}.jsonl' }],
    });
    const prefix = queuePrefix(raw);
    const configPath = writeConfig(dir, raw);
    const start = cliStarter(configPath);
    const procs = [start('poll', 'poll'), start('work', 'a')];
    const admin = createRedisConnection(cluster.url, 'admin', pino({ level: 'silent' }));
    const lines = () => readJsonlFiles(dir, 'changes-');
    const delivered = () => new Set(lines().map((c) => c.key)).size;
    const trace = progressTrace(() => `delivered ${delivered()}`);
    await eventually(() => delivered() >= BACKLOG * 0.2, 60_000, `first keys delivered ${note}`);
    const live = setInterval(() => {
      sandbox.generate('scheduling', 3);
      sandbox.generate('workflow', 3);
    }, 200);
    try {
      const queue = await cluster.restartPrimaryOf(`{${prefix}:scheduling}:file.0:meta`, {
        loseLastBytes: LOST_BYTES,
      });
      const atQueue = delivered();
      await eventually(
        () => delivered() > atQueue + 20,
        60_000,
        `delivery after the queue's restart ${note}`,
      );
      // Everything the primary wrote since just before a commit of the source is lost, so the lost
      // tail holds that commit however much else (busy shard queues, commits of several pages) the
      // primary wrote meanwhile.
      const stateKey = `{${prefix}:workflow}:source:workflow`;
      const before = await admin.hget(stateKey, 'cursor');
      const mark = await cluster.aofMark(stateKey);
      await eventually(
        async () => (await admin.hget(stateKey, 'cursor')) !== before,
        30_000,
        `a commit of the workflow source ${note}`,
        20,
      );
      const source = await cluster.restartPrimaryOf(stateKey, { loseSince: mark });
      const atSource = delivered();
      await eventually(
        () => delivered() > atSource + 20,
        60_000,
        `delivery after the source's restart ${note}`,
      );
      // The scheduling primary once more, nothing cut: Redis 7.0 replays now the front of a
      // transaction its first load found cut (valkey-io/valkey#4342), slices without their count.
      await cluster.restartPrimaryOf(`{${prefix}:scheduling}:file.0:meta`);
      const atAgain = delivered();
      await eventually(
        () => delivered() > atAgain + 20,
        60_000,
        `delivery after the second restart of the scheduling primary ${note}`,
      );
      clearInterval(live);
      const all = sandboxKeys(sandbox);
      await eventually(() => missingKeys(all, lines()).length === 0, 90_000, `every key ${note}`).catch(
        (err: Error) => {
          const missing = missingKeys(all, lines());
          for (const p of procs) writeFileSync(join(dir, `output-${p.pid}.log`), p.text());
          throw new Error(
            `${err.message} (process output in ${dir}):\n${trace.text()}\n${missing.length} missing (e.g. ${missing.slice(0, 5).join(', ')})`,
          );
        },
      );
      const copies = lines().length - new Set(lines().map((c) => c.key)).size;
      // Pages read again, their slices already queued, are not counted twice.
      await expectClusterBacklogDrained(admin, prefix, 'file', ['scheduling', 'workflow'], note);
      // The poller found Redis's cursor behind its own and read the forgotten pages again.
      const rewound = procs[0]!.logs().filter((e) => /the stored cursor is/.test(String(e.err ?? ''))).length;
      console.log(
        `redis cluster restarts in place: scheduling's primary ${queue.port} down ${queue.downMs} ms ` +
          `(${queue.lostBytes} AOF bytes lost), workflow's primary ${source.port} down ${source.downMs} ms ` +
          `(${source.lostBytes} bytes lost); ${all.length} changes, lost 0, copies ${copies}; the poller went back ` +
          `to Redis's cursor ${rewound} times`,
      );
      expect(rewound, `the source's primary forgot commits, and the poller noticed ${note}`).toBeGreaterThan(
        0,
      );
      for (const p of procs) expect(p.exit, `process ${p.pid} still running ${note}`).toBeUndefined();
    } finally {
      clearInterval(live);
      trace.stop();
      admin.disconnect();
    }
    const exits = await stopGracefully(procs, SHUTDOWN_MS);
    for (const exit of exits) expect(exit, `graceful stop ${note}`).toMatchObject({ code: 0, signal: null });
  });
});
