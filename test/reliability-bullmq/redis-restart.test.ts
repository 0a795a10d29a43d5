// Redis goes away and comes back mid-run (appendonly yes, so the queue survives the restart): the
// `poll` and `work` processes ride it out without exiting, and every change is delivered after.
import { writeFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { tempDir } from '../support/harness.js';
import { killAllCli, writeConfig } from '../support/process.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import {
  bullmqConfig,
  eventually,
  missingKeys,
  progressTrace,
  readJsonlFiles,
  sandboxKeys,
  seededRandom,
  seedNote,
  sleep,
  stopGracefully,
  queuePrefix,
  testSeed,
  waitStarted,
  watchRedisCursors,
  cliStarter,
} from './support.js';

const BACKLOG = 800;
const SHUTDOWN_MS = 5000;
const seed = testSeed();
const note = seedNote(seed);

describe(`bullmq: redis restart mid-run ${note}`, () => {
  let sandbox: Sandbox;
  let redis: RedisServer;
  const dir = tempDir('feedsync-rb-redis-');

  beforeAll(async () => {
    redis = await startRedis({ appendonly: true });
    sandbox = await startSandbox({ seed, backlog: BACKLOG });
  });
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
    await redis?.stop();
  });

  it('loses nothing and no process crashes', { timeout: 150_000 }, async () => {
    const random = seededRandom(seed);
    const raw = bullmqConfig(sandbox, dir, redis.url, {
      shutdownTimeoutMs: SHUTDOWN_MS,
      sinks: [{ name: 'file', type: 'jsonl', path: './changes-${WORKER_ID}.jsonl' }],
    });
    const configPath = writeConfig(dir, raw);
    // Scaled mode keeps the cursors in Redis: they must come back with it.
    const cursors = watchRedisCursors(redis.url, queuePrefix(raw));
    const start = cliStarter(configPath);
    const procs = [start('poll', 'poll'), start('work', 'a'), start('work', 'b')];
    await waitStarted(...procs);

    const expected = sandboxKeys(sandbox);
    const delivered = () => new Set(readJsonlFiles(dir, 'changes-').map((c) => c.key)).size;
    const trace = progressTrace(() => `delivered ${delivered()}`);
    // Restart while both sides are busy: the poller still queueing, the workers delivering.
    const restartAt = Math.floor(expected.length * (0.05 + 0.25 * random()));
    await eventually(() => delivered() >= restartAt, 60_000, `${restartAt} keys delivered ${note}`);
    const runIdBefore = await serverRunId(redis.url);
    const cursorsBefore = await Promise.all(['scheduling', 'workflow'].map((s) => cursors.read(s)));
    await redis.restart();
    const afterRestart = delivered();
    // A few more events appear while the processes reconnect: polled after the outage.
    sandbox.generate('scheduling', 20);
    sandbox.generate('workflow', 20);
    const all = sandboxKeys(sandbox);

    await eventually(
      () => missingKeys(all, readJsonlFiles(dir, 'changes-')).length === 0,
      110_000,
      `every key after the redis restart ${note}`,
    ).catch((err: Error) => {
      trace.stop();
      const missing = missingKeys(all, readJsonlFiles(dir, 'changes-'));
      const dead = procs.filter((p) => p.exit).map((p) => `${p.pid}: ${JSON.stringify(p.exit)}`);
      for (const p of procs) writeFileSync(join(dir, `output-${p.pid}.log`), p.text());
      throw new Error(
        `${err.message} (process output in ${dir}):\n${trace.text()}\n${missing.length} missing (e.g. ${missing.slice(0, 5).join(', ')}); exited: ${dead.join('; ') || 'none'}`,
      );
    });
    trace.stop();
    expect(afterRestart, `the restart happened mid-run ${note}`).toBeLessThan(expected.length);
    const cursorsAfter = await Promise.all(['scheduling', 'workflow'].map((s) => cursors.read(s)));
    cursors.stop();
    expect(cursorsBefore[0], `a scheduling cursor was saved before the restart ${note}`).toBeGreaterThan(0);
    for (const [i, before] of cursorsBefore.entries())
      expect(cursorsAfter[i]!, `cursor kept across the restart ${note}`).toBeGreaterThanOrEqual(before ?? 0);
    // Nobody crashed or gave up meanwhile.
    await sleep(200);
    for (const p of procs) expect(p.exit, `process ${p.pid} still running ${note}`).toBeUndefined();
    // Redis was really gone (a new server process), and every process connected to the new one.
    // (A process that was idle at that moment logs nothing: no command of its failed.)
    const after = await serverInfo(redis.url);
    expect(after.run_id, `a new redis-server ${note}`).not.toBe(runIdBefore);
    // Each process holds at least two connections (poll: producer and lease; work: worker, lease,
    // blocking); the cursor watcher's and this check's own are two more.
    expect(
      Number(after.total_connections_received),
      `the processes reconnected ${note}`,
    ).toBeGreaterThanOrEqual(2 * procs.length + 2);

    const exits = await stopGracefully(procs, SHUTDOWN_MS);
    for (const exit of exits) {
      expect(exit, `graceful stop ${note}`).toMatchObject({ code: 0, signal: null });
      expect(exit.ms, `stop time of ${exit.pid} ${note}`).toBeLessThanOrEqual(SHUTDOWN_MS + 1_000);
    }
  });
});

/** INFO's fields, read on a connection of its own. */
async function serverInfo(url: string): Promise<Record<string, string>> {
  const client = new Redis(url);
  try {
    const text = await client.info();
    return Object.fromEntries(
      text
        .split('\r\n')
        .filter((line) => line.includes(':'))
        .map((line) => [line.slice(0, line.indexOf(':')), line.slice(line.indexOf(':') + 1)]),
    );
  } finally {
    client.disconnect();
  }
}

async function serverRunId(url: string): Promise<string | undefined> {
  return (await serverInfo(url)).run_id;
}
