// One poller per source across `feedsync poll` replicas (docs/architecture.md, invariant "one poller per source"): the second
// replica waits for the Redis lease and does not poll; once the holder is killed with -9, it takes
// over after the lease's TTL (queue.lease_ttl_ms, 3 s here) and carries on from the cursor in Redis
// without losing a change.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { tempDir } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig, type CliProcess } from '../support/process.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import {
  bullmqConfig,
  eventually,
  isStarted,
  missingKeys,
  readJsonlFiles,
  sandboxKeys,
  seededRandom,
  seedNote,
  sleep,
  stopGracefully,
  testSeed,
  waitStarted,
} from './support.js';

const LOCK_TTL_MS = 3_000;
const SHUTDOWN_MS = 5000;
const seed = testSeed();
const note = seedNote(seed);

const acquired = (e: { msg?: string }) => e.msg === 'acquired the lease of source scheduling';
const waiting = (e: { msg?: string }) => /^waiting for source scheduling held by /.test(e.msg ?? '');

/** Sum of feedsync_polls_total over its labels, scraped from the process's own /metrics. */
async function pollsOf(p: CliProcess): Promise<number> {
  const started = p.logs().find(isStarted);
  const port = Number(started?.metrics_port);
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith('feedsync_polls_total{'))
    .reduce((sum, l) => sum + Number(l.split(' ').at(-1)), 0);
}

describe(`bullmq: two poll processes on one source ${note}`, () => {
  let sandbox: Sandbox;
  let redis: RedisServer;
  const dir = tempDir('feedsync-rb-lock-');

  beforeAll(async () => {
    redis = await startRedis();
    sandbox = await startSandbox({ seed, backlog: 200, rate: 20 });
  });
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
    await redis?.stop();
  });

  it('only the lock holder polls; after kill -9 the other takes over within the TTL', async () => {
    const random = seededRandom(seed);
    const configPath = writeConfig(
      dir,
      bullmqConfig(sandbox, dir, redis.url, {
        services: ['scheduling'],
        shutdownTimeoutMs: SHUTDOWN_MS,
        queue: { lease_ttl_ms: LOCK_TTL_MS },
        sinks: [{ name: 'file', type: 'jsonl', path: './changes.jsonl' }],
      }),
    );
    const first = spawnCli(['poll'], { config: configPath });
    await first.waitForLog(acquired, 20_000, 'the first poller to take the lock');
    const second = spawnCli(['poll'], { config: configPath });
    const worker = spawnCli(['work'], { config: configPath });
    await waitStarted(second, worker);
    const wait = await second.waitForLog(waiting, 10_000, 'the second poller to say it waits');
    expect(String(wait.msg), `names the holder ${note}`).toMatch(new RegExp(`:${first.pid}$`));

    // A seeded while of both running: the holder polls, the other only waits.
    await sleep(1_000 + Math.floor(random() * 2_000));
    expect(await pollsOf(first), `holder polls ${note}`).toBeGreaterThan(0);
    expect(await pollsOf(second), `waiting replica does not poll ${note}`).toBe(0);
    expect(second.logs().some(acquired), note).toBe(false);

    first.signal('SIGKILL');
    await first.waitForExit(5_000);
    const killedAt = Date.now();
    await second.waitForLog(acquired, LOCK_TTL_MS + 5_000, 'the second poller to take over');
    const tookMs = Date.now() - killedAt;
    // The dead holder renewed at most a heartbeat (TTL/4) before dying, so the lease outlives it by ≥ 3/4 TTL.
    expect(tookMs, `took over after the lease expired ${note}`).toBeGreaterThanOrEqual(
      (LOCK_TTL_MS * 3) / 4 - 500,
    );
    expect(tookMs, `took over within TTL + margin ${note}`).toBeLessThanOrEqual(LOCK_TTL_MS + 3_000);
    await eventually(async () => (await pollsOf(second)) > 0, 5_000, `the new holder polls ${note}`);

    // Nothing was lost across the takeover: stop the live events and drain.
    sandbox.setRate(0);
    const expected = sandboxKeys(sandbox, ['scheduling']);
    await eventually(
      () => missingKeys(expected, readJsonlFiles(dir, 'changes')).length === 0,
      30_000,
      `every scheduling key delivered after the takeover ${note}`,
    );

    const exits = await stopGracefully([second, worker], SHUTDOWN_MS);
    for (const exit of exits) {
      expect(exit, `graceful stop ${note}`).toMatchObject({ code: 0, signal: null });
      expect(exit.ms, `stop time of ${exit.pid} ${note}`).toBeLessThanOrEqual(SHUTDOWN_MS + 1_000);
    }
  });
});
