// Redis Cluster: 3 primaries with two replicas each (Debian's redis-server, cluster mode), feedsync
// through queue.redis_url in redis+cluster:// form. Each source has its own hash tag, its shard
// queues included; the prefix is picked so that the two sources live on different primaries.
// Mid-drain, under live traffic, the slot of the scheduling source (its state and its queues) is
// migrated online to the third primary, then the primary of the workflow source is killed
// (SIGKILL) and its replica promoted. Reported: lost, copies, stall of each source, readiness.
// Nothing may be lost; the migration writes nothing twice (a commit that meets MOVED is refused
// whole and retried); the failover may repeat only deliveries whose progress the dead primary had
// not yet replicated; the scheduling source, whose primary stays healthy, keeps delivering; every
// backlog counter is exact once everything is delivered. Every commit waits for one replica
// (queue.min_replicas_acked).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { createRedisConnection } from '../../src/queue/bullmq/redis.js';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { tempDir } from '../support/harness.js';
import { killAllCli, writeConfig } from '../support/process.js';
import { startRedisCluster, type RedisClusterSet } from '../support/redis-cluster.js';
import { metricsPortOf } from '../ops/support/cli.js';
import {
  bullmqConfig,
  clusterBacklogs,
  eventually,
  expectClusterBacklogDrained,
  missingKeys,
  progressTrace,
  readJsonlFiles,
  sandboxKeys,
  seedNote,
  sleep,
  stopGracefully,
  testSeed,
  cliStarter,
} from './support.js';

// RB_BACKLOG: a longer run (npm run soak with SOAK_SCENARIOS=cluster,sentinel).
const BACKLOG = Number(process.env.RB_BACKLOG ?? 3000);
const PASSWORD = 'cluster-test-s3cret';
const SHUTDOWN_MS = 5000;
const seed = testSeed();
const note = seedNote(seed);

/** A queue prefix whose two source tags fall on different primaries (the point of the tags: spreading). */
async function spreadPrefix(cluster: RedisClusterSet): Promise<string> {
  for (let i = 0; ; i++) {
    const prefix = `rbc-${seed % 1000}-${i}`;
    const [a, b] = await Promise.all(SOURCES.map((s) => cluster.ownerOf(`{${prefix}:${s}}`)));
    if (a !== b) return prefix;
  }
}
const SOURCES = ['scheduling', 'workflow'];

describe(`bullmq: redis cluster, slot migration and failover mid-drain ${note}`, () => {
  let sandbox: Sandbox;
  let cluster: RedisClusterSet;
  const dir = tempDir('feedsync-rb-cluster-');

  beforeAll(async () => {
    // Two replicas per primary: after the failover the promoted one still has a replica, so
    // commits keep being acknowledged by one (queue.min_replicas_acked: 1, WAIT on each source's
    // primary).
    cluster = await startRedisCluster({ password: PASSWORD, nodeTimeoutMs: 1000, replicasPerPrimary: 2 });
    sandbox = await startSandbox({ seed, backlog: BACKLOG });
  }, 60_000);
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
    await cluster?.stop();
  });

  it(
    'spreads sources over primaries, survives a slot migration and a failover, loses nothing, counts exact',
    { timeout: 180_000 },
    async () => {
      const prefix = await spreadPrefix(cluster);
      const raw = bullmqConfig(sandbox, dir, cluster.url, {
        shutdownTimeoutMs: SHUTDOWN_MS,
        queue: { prefix, shards: 2, min_replicas_acked: 1 },
        sinks: [{ name: 'file', type: 'jsonl', path: './changes-${WORKER_ID}.jsonl' }],
      });
      const configPath = writeConfig(dir, raw);
      const start = cliStarter(configPath);
      const procs = [start('poll', 'poll'), start('work', 'a'), start('work', 'b')];
      const ports = await Promise.all(procs.map((p) => metricsPortOf(p)));

      const stateKey = (source: string) => `{${prefix}:${source}}:source:${source}`;
      const queueKey = (source: string, shard: number) => `{${prefix}:${source}}:file.${shard}:meta`;
      const owners = {
        scheduling: await cluster.ownerOf(stateKey('scheduling')),
        workflow: await cluster.ownerOf(stateKey('workflow')),
      };
      expect(owners.scheduling, 'the two sources live on different primaries').not.toBe(owners.workflow);
      for (const source of SOURCES)
        for (const shard of [0, 1])
          expect(await cluster.ownerOf(queueKey(source, shard)), `${source}'s queues live with it`).toBe(
            owners[source as 'scheduling' | 'workflow'],
          );

      // Readiness of every process, sampled through the whole run.
      const readiness: { at: number; codes: number[] }[] = [];
      // Why each process was unready, first seen per reason (printed with the figures).
      const unreadyWhy = new Map<string, number>();
      const sampler = setInterval(() => {
        void Promise.all(
          ports.map((port, i) =>
            fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(2_000) }).then(
              async (r) => {
                if (r.status !== 200) {
                  const why = `${procs[i]!.pid}: ${(await r.text()).replace(/\d+/g, 'N').slice(0, 300)}`;
                  unreadyWhy.set(why, (unreadyWhy.get(why) ?? 0) + 1);
                }
                return r.status;
              },
              () => 0,
            ),
          ),
        ).then((codes) => readiness.push({ at: Date.now(), codes }));
      }, 250);

      const lines = () => readJsonlFiles(dir, 'changes-');
      const delivered = (source?: string) =>
        new Set(
          lines()
            .filter((c) => !source || c.source === source)
            .map((c) => c.key),
        ).size;
      const trace = progressTrace(() => `delivered ${delivered()}`);
      await eventually(() => delivered() >= BACKLOG * 0.2, 60_000, `first keys delivered ${note}`);
      const live = setInterval(() => {
        sandbox.generate('scheduling', 3);
        sandbox.generate('workflow', 3);
      }, 200);

      // 1. Online slot migration of the scheduling source (state and queues: one slot) to the
      // primary that holds neither source.
      const nodes = await cluster.nodes();
      const spare = nodes.find(
        (n) => n.role === 'master' && n.port !== owners.scheduling && n.port !== owners.workflow,
      )!;
      const migrationStart = Date.now();
      const migrated = await cluster.migrateSlotOf(stateKey('scheduling'), spare.port);
      expect(await cluster.ownerOf(stateKey('scheduling'))).toBe(spare.port);
      const migrationMs = Date.now() - migrationStart;
      const afterMigration = delivered();
      await eventually(
        () => delivered() > afterMigration + 20,
        60_000,
        `delivery after the migration ${note}`,
      );
      const migrationStallMs = Date.now() - migrationStart;

      // 2. The primary of the workflow source dies; its replica takes over. The scheduling source,
      // on a healthy primary, must not notice.
      const atKill = { scheduling: delivered('scheduling'), workflow: delivered('workflow') };
      const killedAt = Date.now();
      const failover = await cluster.killPrimaryOf(stateKey('workflow'));
      const resumed = async (source: 'scheduling' | 'workflow', by: number) => {
        await eventually(
          () => delivered(source) > atKill[source] + by,
          60_000,
          `${source} delivering after the failover ${note}`,
        );
        return Date.now() - killedAt;
      };
      const [healthyStallMs, stallMs] = await Promise.all([
        resumed('scheduling', 5),
        resumed('workflow', 20),
      ]);
      // Both sources keep moving: new live events of each arrive.
      const newest = (service: 'scheduling' | 'workflow') =>
        Math.max(...sandbox.events(service).map((e) => e.id));
      const wantScheduling = `scheduling:${newest('scheduling')}`;
      const wantWorkflow = `workflow:${newest('workflow')}`;
      await sleep(2_000);
      clearInterval(live);

      const all = sandboxKeys(sandbox);
      await eventually(() => missingKeys(all, lines()).length === 0, 90_000, `every key ${note}`).catch(
        (err: Error) => {
          trace.stop();
          const missing = missingKeys(all, lines());
          for (const p of procs) writeFileSync(join(dir, `output-${p.pid}.log`), p.text());
          throw new Error(
            `${err.message} (process output in ${dir}):\n${trace.text()}\n${missing.length} missing (e.g. ${missing.slice(0, 5).join(', ')})`,
          );
        },
      );
      trace.stop();
      // Ready again on every process once the cluster is whole.
      await eventually(
        () => readiness.length > 0 && readiness.at(-1)!.codes.every((c) => c === 200),
        30_000,
        `every process ready again ${note}`,
      ).catch((err: Error) => {
        throw new Error(
          `${err.message}; unready:\n${[...unreadyWhy].map(([why, n]) => `×${n} ${why}`).join('\n')}`,
        );
      });
      clearInterval(sampler);
      const keysSeen = new Set(lines().map((c) => c.key));
      expect(keysSeen.has(wantScheduling) && keysSeen.has(wantWorkflow), 'live events of both sources').toBe(
        true,
      );
      const copies = lines().length - keysSeen.size;
      const admin = createRedisConnection(cluster.url, 'admin', pino({ level: 'silent' }));
      const atDrain = await clusterBacklogs(admin, prefix, 'file', SOURCES);
      const unreadyMs = readiness.filter((r) => r.codes.some((c) => c !== 200)).length * 250;
      console.log(
        `redis cluster: sources on primaries ${owners.scheduling} / ${owners.workflow}; source slot ` +
          `${migrated.slot} (${migrated.keys} keys) migrated in ${migrationMs} ms, delivery went on ` +
          `${migrationStallMs} ms after it began; failover ${failover.failoverMs} ms, the failed-over ` +
          `source delivering ${stallMs} ms after the kill, the other ${healthyStallMs} ms; lost 0, ` +
          `copies ${copies}, some process unready for ~${unreadyMs} ms` +
          [...unreadyWhy].map(([why, n]) => `\n  unready ×${n} ${why}`).join(''),
      );
      try {
        await expectClusterBacklogDrained(admin, prefix, 'file', SOURCES, `(migrated, failed over) ${note}`);
      } catch (err) {
        for (const p of procs) writeFileSync(join(dir, `output-${p.pid}.log`), p.text());
        throw new Error(`${(err as Error).message} (process output in ${dir})`);
      } finally {
        admin.disconnect();
      }
      console.log(`backlog counters when every change was delivered: ${atDrain.join(', ')}`);
      expect
        .soft(atDrain, `backlog counters exact once every change was delivered ${note}`)
        .toEqual(SOURCES.map(() => 0));
      expect(
        stallMs,
        `stall of the failed-over source after the kill (failover ${failover.failoverMs} ms) ${note}`,
      ).toBeLessThanOrEqual(2 * failover.failoverMs + 3_000);
      expect(
        healthyStallMs,
        `stall of the source on a healthy primary (failover ${failover.failoverMs} ms) ${note}`,
      ).toBeLessThanOrEqual(2 * failover.failoverMs);
      for (const p of procs) expect(p.exit, `process ${p.pid} still running ${note}`).toBeUndefined();
      for (const p of procs) expect(p.text(), `the password is never logged ${note}`).not.toContain(PASSWORD);
      const exits = await stopGracefully(procs, SHUTDOWN_MS);
      for (const exit of exits)
        expect(exit, `graceful stop ${note}`).toMatchObject({ code: 0, signal: null });
    },
  );
});
