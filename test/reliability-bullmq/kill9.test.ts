// Scaled-out deployment under kill -9: one `feedsync poll` and two `feedsync work` processes drain a
// ~2000-event backlog per service into per-worker jsonl files and one shared sqlite mirror, while a
// worker and then the poller are killed with SIGKILL at seeded random moments and restarted, during
// catch-up and again during live traffic.
// CONTRACT §4: every key reaches the jsonl sink at least once; the mirror ends equal to the
// sandbox's live state; SIGTERM stops every process with exit 0 within shutdown_timeout_ms.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { assertValidChange } from '../support/change-schema.js';
import { tempDir } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig, type CliProcess } from '../support/process.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import {
  bullmqConfig,
  eventually,
  missingKeys,
  progressTrace,
  mirrorProblems,
  readJsonlFiles,
  sandboxKeys,
  seededRandom,
  seedNote,
  sleep,
  stopGracefully,
  storedCursor,
  testSeed,
  waitStarted,
} from './support.js';

const BACKLOG = 2000;
const SHUTDOWN_MS = 5000;
const seed = testSeed();
const note = seedNote(seed);

describe(`bullmq: poll + 2 work under kill -9 ${note}`, () => {
  let sandbox: Sandbox;
  let redis: RedisServer;
  const dir = tempDir('feedsync-rb-kill9-');

  beforeAll(async () => {
    redis = await startRedis();
    // A little latency per request keeps the poller busy long enough to be killed mid-catch-up.
    sandbox = await startSandbox({ seed, backlog: BACKLOG, latencyMs: 2 });
  });
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
    await redis?.stop();
  });

  it(
    'delivers every key at least once and the mirror equals the live state',
    { timeout: 240_000 },
    async () => {
      const random = seededRandom(seed);
      const configPath = writeConfig(
        dir,
        bullmqConfig(sandbox, dir, redis.url, {
          shutdownTimeoutMs: SHUTDOWN_MS,
          sinks: [
            // One file per worker: a process killed mid-append leaves a torn line that only its own
            // next incarnation (which re-reads the tail) knows to terminate.
            { name: 'file', type: 'jsonl', path: './changes-${WORKER_ID}.jsonl' },
            { name: 'mirror', type: 'sqlite', path: './mirror.db' },
          ],
        }),
      );
      const storePath = join(dir, 'feedsync.db');
      let expected = sandboxKeys(sandbox);
      const maxScheduling = Math.max(...sandbox.events('scheduling').map((e) => e.id));
      const start = (mode: 'poll' | 'work', id: string): CliProcess =>
        spawnCli([mode], {
          config: configPath,
          env: { WORKER_ID: id },
          echo: process.env.RB_ECHO ? `[${mode} ${id}]` : undefined,
        });
      const delivered = (): number => new Set(readJsonlFiles(dir, 'changes-').map((c) => c.key)).size;

      let poller = start('poll', 'poll');
      let workerA = start('work', 'a');
      let workerB = start('work', 'b');
      await waitStarted(poller, workerA, workerB);

      // Worker A dies once a seeded share (10–40 %) of the keys has landed.
      const trace = progressTrace(
        () =>
          `delivered ${delivered()}/${expected.length}, cursors scheduling ${storedCursor(storePath, 'scheduling')}/${maxScheduling} workflow ${storedCursor(storePath, 'workflow')}`,
      );
      const workerKillAt = Math.floor(expected.length * (0.1 + 0.3 * random()));
      await eventually(() => delivered() >= workerKillAt, 60_000, `${workerKillAt} keys delivered ${note}`);
      workerA.signal('SIGKILL');
      await workerA.waitForExit(5_000);
      workerA = start('work', 'a');
      await waitStarted(workerA);

      // The poller dies once its scheduling cursor passes a seeded point of the backlog; if it is
      // already past it, it dies at once (still while workers drain and the other source may poll).
      const pollerKillAt = Math.floor(maxScheduling * (0.2 + 0.6 * random()));
      await eventually(
        () => (storedCursor(storePath, 'scheduling') ?? 0) >= pollerKillAt,
        60_000,
        `scheduling cursor ≥ ${pollerKillAt} ${note}`,
      );
      await sleep(Math.floor(random() * 200));
      poller.signal('SIGKILL');
      await poller.waitForExit(5_000);
      // The dead poller's Redis lock lives on until its TTL (15 s): the new one waits, then takes over.
      poller = start('poll', 'poll');
      await waitStarted(poller);

      // Live traffic: the other worker and then the poller die again while new events arrive; the
      // poller only once the restarted one holds the lock (after the dead one's TTL) and polls.
      await eventually(
        () => poller.text().includes('acquired lock of source workflow'),
        30_000,
        `first poller took over ${note}`,
      );
      sandbox.setRate(20);
      await sleep(500 + Math.floor(random() * 1500));
      workerB.signal('SIGKILL');
      await workerB.waitForExit(5_000);
      workerB = start('work', 'b');
      await waitStarted(workerB);
      await sleep(500 + Math.floor(random() * 1500));
      poller.signal('SIGKILL');
      await poller.waitForExit(5_000);
      poller = start('poll', 'poll');
      await waitStarted(poller);
      // Stay live until the new poller holds the lock (TTL) and has polled, then stop the traffic.
      await eventually(
        () => poller.text().includes('acquired lock of source workflow'),
        30_000,
        `poller took over ${note}`,
      );
      await sleep(1_000);
      sandbox.setRate(0);
      expected = sandboxKeys(sandbox);

      await eventually(
        () => missingKeys(expected, readJsonlFiles(dir, 'changes-')).length === 0,
        90_000,
        `every sandbox key in the jsonl files ${note}`,
      ).catch((err: Error) => {
        const missing = missingKeys(expected, readJsonlFiles(dir, 'changes-'));
        trace.stop();
        throw new Error(
          `${err.message}:\n${trace.text()}\n${missing.length} missing, e.g. ${missing.slice(0, 5).join(', ')}`,
        );
      });

      trace.stop();
      const changes = readJsonlFiles(dir, 'changes-');
      for (const change of changes) assertValidChange(change);
      // Copies of one key are the same change (at least once, keyed).
      const byKey = new Map<string, string>();
      for (const change of changes) {
        const text = JSON.stringify(change);
        const first = byKey.get(change.key);
        if (first !== undefined) expect(text, `duplicate of ${change.key} differs ${note}`).toBe(first);
        else byKey.set(change.key, text);
      }
      expect(byKey.size, note).toBe(expected.length);

      // The mirror is written by two processes; it converges once every change is applied.
      await eventually(
        () => mirrorProblems(join(dir, 'mirror.db'), sandbox).length === 0,
        30_000,
        `mirror equal to the live state ${note}`,
      ).catch((err: Error) => {
        throw new Error(`${err.message}:\n${mirrorProblems(join(dir, 'mirror.db'), sandbox).join('\n')}`);
      });

      const exits = await stopGracefully([poller, workerA, workerB], SHUTDOWN_MS);
      for (const exit of exits) {
        expect(exit, `graceful stop ${note}`).toMatchObject({ code: 0, signal: null });
        expect(exit.ms, `stop time of ${exit.pid} ${note}`).toBeLessThanOrEqual(SHUTDOWN_MS + 1_000);
      }
    },
  );
});
