// Standby pollers on a Redis Cluster, where a source's page commit is one MULTI in the source's
// slot, its shard queues included: two `feedsync poll` and one `feedsync work`, 4 shards, lease
// TTL 3 s. Faults on the pollers: kill -9 of a source's holder twice during catch-up, then a holder
// frozen with SIGSTOP past its lease while live traffic goes on, and thawed once the standby took
// over (it may hold pages in memory that the standby committed meanwhile). Checked over the whole
// history: every change delivered, none handed to the sink twice (completed slices are removed
// after a second, so a page committed twice would be delivered twice), backlog counters at 0.
import { hostname } from 'node:os';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisConnection } from '../../src/queue/bullmq/redis.js';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { tempDir } from '../support/harness.js';
import { killAllCli, writeConfig, type CliProcess } from '../support/process.js';
import { startRedisCluster, type RedisClusterSet } from '../support/redis-cluster.js';
import { metricsPortOf } from '../ops/support/cli.js';
import { processOf, SOURCES } from './standby-support.js';
import {
  bullmqConfig,
  eventually,
  expectClusterBacklogDrained,
  missingKeys,
  progressTrace,
  queuePrefix,
  readJsonlFiles,
  sandboxKeys,
  seededRandom,
  seedNote,
  sleep,
  stopGracefully,
  subjectOrderProblems,
  testSeed,
  waitStarted,
  cliStarter,
} from './support.js';

const TTL_MS = 3_000;
const SHARDS = 4;
const SHUTDOWN_MS = 5_000;
const seed = testSeed();
const note = seedNote(seed);

describe(`scaled mode on a Redis Cluster: standby pollers ${note}`, () => {
  let cluster: RedisClusterSet;
  let sandbox: Sandbox;

  beforeAll(async () => {
    cluster = await startRedisCluster({ password: 'pollers-pw' });
    sandbox = await startSandbox({ seed, backlog: 1500, latencyMs: 100 });
  }, 60_000);
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
    await cluster?.stop();
  });

  it(
    'kill -9 and a freeze of the holder: nothing lost, no copy, counts exact',
    { timeout: 150_000 },
    async () => {
      const random = seededRandom(seed);
      sandbox.generate('scheduling', 2000);
      const dir = tempDir('feedsync-rb-cluster-pollers-');
      const raw = bullmqConfig(sandbox, dir, cluster.url, {
        shutdownTimeoutMs: SHUTDOWN_MS,
        queue: {
          lease_ttl_ms: TTL_MS,
          shards: SHARDS,
          // Completed slices go after a second: a page committed again some seconds later (by a
          // frozen holder resuming) would then be a new job, not a no-op by its id, so only the
          // commit's cursor check keeps it from being delivered twice.
          retain_completed_ms: 1_000,
        },
        sinks: [{ name: 'file', type: 'jsonl', path: './changes-${WORKER_ID}.jsonl' }],
      });
      const prefix = queuePrefix(raw);
      const configPath = writeConfig(dir, raw);
      const start = cliStarter(configPath);
      const client = createRedisConnection(cluster.url, 'admin', pino({ level: 'silent' }));
      const holders = async (): Promise<Record<string, string | undefined>> => {
        const values = await Promise.all(SOURCES.map((s) => client.get(`{${prefix}:${s}}:lease:${s}`)));
        return Object.fromEntries(SOURCES.map((s, i) => [s, values[i]?.slice(values[i]!.indexOf(' ') + 1)]));
      };
      const lines = () => readJsonlFiles(dir, 'changes-');
      const polls = [start('poll', 'p1'), start('poll', 'p2')];
      const works = [start('work', 'a')];
      const trace = progressTrace(() => `delivered ${new Set(lines().map((c) => c.key)).size}`);
      const failovers: string[] = [];

      /** The live holder of `source`, once some poller holds it. */
      const holderOf = async (source: string): Promise<CliProcess> => {
        let found: CliProcess | undefined;
        await eventually(
          async () => (found = processOf((await holders())[source], polls)) !== undefined,
          TTL_MS + 10_000,
          `a live poller to hold ${source} ${note}`,
          50,
        );
        return found!;
      };
      /** Waits until someone other than `owner` holds `source`; the time it took is recorded. */
      const takenOver = async (source: string, owner: string, since: number, what: string) => {
        await eventually(
          async () => {
            const h = (await holders())[source];
            return h !== undefined && h !== owner;
          },
          TTL_MS + 5_000,
          `a standby to hold ${source} after the ${what} ${note}`,
          50,
        );
        failovers.push(`${what} ${source} ${Date.now() - since} ms`);
      };

      try {
        await waitStarted(...polls, ...works);
        // 1. kill -9 of a holder, twice, during catch-up.
        for (let round = 0; round < 2; round++) {
          const source = SOURCES[Math.floor(random() * SOURCES.length)]!;
          const victim = await holderOf(source);
          await sleep(200 + Math.floor(random() * 800));
          const owner = `${hostname()}:${victim.pid}`;
          victim.signal('SIGKILL');
          const exit = await victim.waitForExit(5_000);
          expect(exit.signal, `poller had exited by itself ${note}`).toBe('SIGKILL');
          await takenOver(source, owner, Date.now(), 'kill -9');
          const index = polls.indexOf(victim);
          polls[index] = start('poll', `p${index + 1}-${round}`);
          await waitStarted(polls[index]!);
        }
        await eventually(
          () => missingKeys(sandboxKeys(sandbox), lines()).length === 0,
          90_000,
          `the backlog delivered ${note}\n${trace.text()}`,
        );

        // 2. A holder frozen past its lease under live traffic, thawed after the takeover.
        sandbox.setRate(30);
        const source = SOURCES[Math.floor(random() * SOURCES.length)]!;
        const frozen = await holderOf(source);
        await sleep(500 + Math.floor(random() * 1000));
        const owner = `${hostname()}:${frozen.pid}`;
        const frozenAt = Date.now();
        frozen.signal('SIGSTOP');
        await takenOver(source, owner, frozenAt, 'freeze');
        await sleep(1_000);
        frozen.signal('SIGCONT');
        await sleep(2_000);
        sandbox.setRate(0);
        const expected = sandboxKeys(sandbox);
        await eventually(
          () => missingKeys(expected, lines()).length === 0,
          90_000,
          `every key delivered ${note}\n${trace.text()}`,
        );
        trace.stop();

        const delivered = lines();
        const copies = delivered.length - new Set(delivered.map((c) => c.key)).size;
        // The jsonl sink drops a key it wrote recently; the worker counts every change it handed it.
        const metrics = await (
          await fetch(`http://127.0.0.1:${await metricsPortOf(works[0]!)}/metrics`)
        ).text();
        const handed = Number(
          /^feedsync_deliveries_total\{sink="file",outcome="ok"\} (\d+)/m.exec(metrics)?.[1] ?? NaN,
        );
        let committed = 0;
        for (const s of SOURCES)
          committed += Number(await client.hget(`{${prefix}:${s}}:commit-stats`, 'slices'));
        console.log(
          `cluster pollers: ${expected.length} changes in ${committed} slices committed, failovers ` +
            `${failovers.join(', ')}; copies ${copies}, ${handed} handed to the sink`,
        );
        expect(handed, `changes handed to the sink, each once ${note}`).toBe(expected.length);
        expect(copies, `copies at the sink ${note}`).toBe(0);
        // One worker: its file is the delivery order. Every subject's changes in feed order, which
        // is id order for the scheduling feed (the workflow feed lists events by timestamp, which
        // may differ from their ids' order: spec, GET /api/events).
        const scheduling = delivered.filter((c) => c.key.startsWith('scheduling:'));
        expect(subjectOrderProblems(scheduling), `per-subject order ${note}`).toEqual([]);
        await expectClusterBacklogDrained(client, prefix, 'file', SOURCES, note);
        for (const p of [...polls, ...works])
          expect(p.text(), 'no password in logs').not.toContain('pollers-pw');
      } finally {
        trace.stop();
        const exits = await stopGracefully(
          [...polls, ...works].filter((p) => p.exit === undefined),
          SHUTDOWN_MS,
        );
        client.disconnect();
        for (const exit of exits)
          expect(exit, `graceful stop ${note}`).toMatchObject({ code: 0, signal: null });
      }
    },
  );
});
