// Upgrade in place: a deployment of an earlier release (built from this project's history at
// RELEASE) drains part of a backlog under live traffic and is stopped mid-way — its `poll` killed
// -9 right after a commit, its `work` stopped with slices still queued — then this build's `poll`
// and `work` start on the same Redis. On one Redis the layout is the same; on a Redis Cluster the
// earlier release kept a tag per sink shard and a per-source page outbox (src/queue/bullmq/
// legacy-layout.ts): this build delivers the old queues first, moves what the outbox still holds,
// and says so in its log. Checked: every change delivered, none twice across the two releases,
// per-subject order across the two, old queues and outboxes empty, backlog counters at 0.
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisConnection } from '../../src/queue/bullmq/redis.js';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { tempDir } from '../support/harness.js';
import { killAllCli, writeConfig, type CliProcess } from '../support/process.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { startRedisCluster, type RedisClusterSet } from '../support/redis-cluster.js';
import { hasCommit, releaseCli } from '../support/release-build.js';
import { metricsPortOf } from '../ops/support/cli.js';
import {
  bullmqConfig,
  cliStarter,
  eventually,
  missingKeys,
  queuePrefix,
  readJsonlFiles,
  sandboxKeys,
  seedNote,
  sleep,
  stopGracefully,
  subjectOrderProblems,
  testSeed,
  waitStarted,
} from './support.js';

/** The last commit with the earlier cluster layout (per-shard tags and the page outbox). */
const RELEASE = '4cc13fd';
const SHARDS = 2;
const SOURCES = ['scheduling', 'workflow'] as const;
const seed = testSeed();
const note = seedNote(seed);
const history = hasCommit(RELEASE);
if (!history)
  console.warn(
    `upgrade tests skipped: this clone lacks commit ${RELEASE} (a shallow clone); git fetch --unshallow`,
  );

describe.runIf(history).each(['one Redis', 'a Redis Cluster'] as const)(
  `upgrade in place on %s ${note}`,
  (topology) => {
    const cluster = topology === 'a Redis Cluster';
    let sandbox: Sandbox;
    let redis: RedisServer | undefined;
    let clusterSet: RedisClusterSet | undefined;
    let oldCli: string;

    beforeAll(async () => {
      oldCli = releaseCli(RELEASE);
      [sandbox] = await Promise.all([
        startSandbox({ seed, backlog: 1500 }),
        cluster
          ? startRedisCluster({ password: 'upgrade-pw', replicasPerPrimary: 0 }).then(
              (c) => void (clusterSet = c),
            )
          : startRedis({ appendonly: true }).then((r) => void (redis = r)),
      ]);
    }, 180_000);
    afterAll(async () => {
      await killAllCli();
      await sandbox?.close();
      await clusterSet?.stop();
      await redis?.stop();
    });

    it(
      'loses nothing, copies nothing, keeps per-subject order across the two releases',
      { timeout: 240_000 },
      async () => {
        const url = clusterSet?.url ?? redis!.url;
        const dir = tempDir('feedsync-rb-upgrade-');
        const raw = bullmqConfig(sandbox, dir, url, {
          queue: { shards: SHARDS },
          sinks: [{ name: 'file', type: 'jsonl', path: './changes-${WORKER_ID}.jsonl' }],
        });
        const prefix = queuePrefix(raw);
        const configPath = writeConfig(dir, raw);
        const client = createRedisConnection(url, 'admin', pino({ level: 'silent' }));
        const lines = (who: string) => readJsonlFiles(dir, `changes-${who}`);
        const live = setInterval(() => {
          sandbox.generate('scheduling', 2);
          sandbox.generate('workflow', 2);
        }, 200);
        const procs: CliProcess[] = [];
        try {
          // 1. The earlier release: poll and work, stopped mid-drain with slices still queued.
          const old = cliStarter(configPath, oldCli);
          const oldPoll = old('poll', 'old-poll');
          const oldWork = old('work', 'old');
          procs.push(oldPoll, oldWork);
          await waitStarted(oldPoll, oldWork);
          await eventually(
            () => lines('old').length >= 300,
            60_000,
            `the earlier release delivering ${note}`,
          );
          await stopGracefully([oldWork], 5_000);
          // Right after a commit of each source: its page is in the outbox (kept a while once forwarded).
          const cursors = async () =>
            Promise.all(
              SOURCES.map((s) => client.hget(`{${prefix}${cluster ? `:${s}` : ''}}:source:${s}`, 'cursor')),
            );
          // Two commits of each source with no work running: the newest page is then made
          // outbox-only below, and the one before stays in the old queues (both cases under test).
          for (const which of ['a first', 'a second']) {
            const before = await cursors();
            await eventually(
              async () => (await cursors()).every((c, i) => c !== before[i]),
              30_000,
              `${which} commit of each source by the earlier release ${note}`,
              20,
            );
          }
          oldPoll.signal('SIGKILL');
          await oldPoll.waitForExit(5_000);
          // As if it had died between its last commit and the forward: each source's newest page is
          // only in its outbox (not in the old queues, no mark, not counted there).
          const unforwarded = cluster ? await leaveOnlyInOutbox(client, prefix) : 0;
          const outboxes = cluster
            ? await Promise.all(SOURCES.map((s) => client.llen(`{${prefix}:${s}}:outbox:${s}`)))
            : [];
          const oldQueued = cluster
            ? (
                await Promise.all([0, 1].map((n) => client.llen(`{${prefix}:sink:file.${n}}:file.${n}:wait`)))
              ).reduce((a, b) => a + b, 0)
            : 0;

          // 2. This build on the same Redis.
          const next = cliStarter(configPath);
          const poll = next('poll', 'new-poll');
          const work = next('work', 'new');
          procs.push(poll, work);
          await waitStarted(poll, work);
          await sleep(3_000);
          clearInterval(live);
          const all = sandboxKeys(sandbox);
          await eventually(
            () => missingKeys(all, [...lines('old'), ...lines('new')]).length === 0,
            120_000,
            `every change delivered across the two releases ${note}`,
          );
          await sleep(1_000);
          const oldLines = lines('old');
          const newLines = lines('new');
          const keys = [...oldLines, ...newLines].map((c) => c.key);
          const copies = keys.length - new Set(keys).size;
          // The jsonl sink drops a key it wrote recently: the worker's own count shows what it handed it.
          const metrics = await (await fetch(`http://127.0.0.1:${await metricsPortOf(work)}/metrics`)).text();
          const handed = Number(
            /^feedsync_deliveries_total\{sink="file",outcome="ok"\} (\d+)/m.exec(metrics)?.[1],
          );
          console.log(
            `upgrade on ${topology}: ${all.length} changes, ${oldLines.length} by the earlier release, ` +
              `${newLines.length} by this build (${handed} handed to the sink); old outbox entries left ` +
              `${outboxes.join('/') || '-'} (${unforwarded} slices left only there), old queue slices left ` +
              `${oldQueued}; copies ${copies}`,
          );
          expect(copies, `changes delivered twice across the upgrade ${note}`).toBe(0);
          expect(handed, `changes this build handed to the sink, each once ${note}`).toBe(newLines.length);
          const scheduling = [...oldLines, ...newLines].filter((c) => c.source === 'scheduling');
          expect(subjectOrderProblems(scheduling), `per-subject order across the upgrade ${note}`).toEqual(
            [],
          );
          if (cluster) {
            expect(
              oldQueued,
              'the earlier release left slices in its queues (the case under test)',
            ).toBeGreaterThan(0);
            expect(
              work.logs().some((e) => /cluster layout of an earlier release/.test(String(e.msg))),
              'work says it drains the earlier layout first',
            ).toBe(true);
            expect(unforwarded, 'pages left only in the outbox (the case under test)').toBeGreaterThan(0);
            const moved = poll.logs().filter((e) => /page outbox of an earlier release/.test(String(e.msg)));
            expect(moved.length, 'poll says it moved each outbox').toBeGreaterThan(0);
            expect(
              moved.reduce((n, e) => n + Number(e.slices ?? 0), 0),
              'the pages left only in the outbox were queued again',
            ).toBeGreaterThan(0);
            for (const s of SOURCES) expect(await client.exists(`{${prefix}:${s}}:outbox:${s}`)).toBe(0);
            for (const n of [0, 1])
              expect(
                await client.llen(`{${prefix}:sink:file.${n}}:file.${n}:wait`),
                'old queues drained',
              ).toBe(0);
          }
          const backlogKeys = cluster
            ? [
                ...SOURCES.map((s) => `{${prefix}:${s}}:backlog`),
                ...[0, 1].map((n) => `{${prefix}:sink:file.${n}}:backlog`),
              ]
            : [`{${prefix}}:backlog`];
          await eventually(
            async () =>
              (await Promise.all(backlogKeys.map((k) => client.hget(k, 'file')))).every(
                (v) => Number(v ?? 0) === 0,
              ),
            15_000,
            `backlog counters at 0 ${note}`,
          );
        } finally {
          clearInterval(live);
          client.disconnect();
          const exits = await stopGracefully(
            procs.filter((p) => p.exit === undefined),
            5_000,
          );
          for (const exit of exits)
            expect(exit, `graceful stop ${note}`).toMatchObject({ code: 0, signal: null });
        }
      },
    );
  },
);

/**
 * Takes each source's newest outbox page out of the earlier layout's queues (job, forwarding mark,
 * backlog count), as a `poll` killed between commit and forward leaves it; returns the slices.
 */
async function leaveOnlyInOutbox(client: Redis, prefix: string): Promise<number> {
  let slices = 0;
  for (const source of SOURCES) {
    const raw = await client.lindex(`{${prefix}:${source}}:outbox:${source}`, -1);
    if (!raw) continue;
    const entry = JSON.parse(raw.slice(raw.indexOf(' ') + 1)) as {
      id: string;
      slices: { sink: string; shard: number; jobId: string; changes: unknown[] }[];
    };
    for (const slice of entry.slices) {
      const tag = `{${prefix}:sink:${slice.sink}.${slice.shard}}`;
      const queue = new Queue(`${slice.sink}.${slice.shard}`, { connection: client, prefix: tag });
      try {
        const job = await queue.getJob(slice.jobId);
        const marked = (await client.zscore(`${tag}:forwarded:${source}`, entry.id)) !== null;
        if (job) {
          expect(await job.getState(), `slice ${slice.jobId} not yet taken by a worker`).toBe('waiting');
          await job.remove();
          await client.zrem(`${tag}:forwarded:${source}`, entry.id);
          await client.hincrby(`${tag}:backlog`, slice.sink, -slice.changes.length);
        } else expect(marked, `slice ${slice.jobId}: neither queued nor marked, never forwarded`).toBe(false);
        slices++;
      } finally {
        await queue.close();
      }
    }
  }
  return slices;
}
