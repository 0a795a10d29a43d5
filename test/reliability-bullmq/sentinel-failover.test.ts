// Sentinel: the primary is killed (SIGKILL) mid-drain; the sentinels promote the replica and every
// connection of `poll` and `work` (BullMQ's copies too) follows it through queue.redis_url in
// redis+sentinel:// form. Delivery resumes and nothing is lost. Then the old primary comes back
// with its old data: until the sentinels demote it, it is a lone primary nobody must write to.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { tempDir } from '../support/harness.js';
import { killAllCli, writeConfig } from '../support/process.js';
import { startSentinelSet, type SentinelSet } from '../support/redis-sentinel.js';
import {
  bullmqConfig,
  eventually,
  missingKeys,
  progressTrace,
  readJsonlFiles,
  sandboxKeys,
  seedNote,
  sleep,
  stopGracefully,
  testSeed,
  waitStarted,
  cliStarter,
} from './support.js';

// RB_BACKLOG: a longer run (npm run soak with SOAK_SCENARIOS=cluster,sentinel).
const BACKLOG = Number(process.env.RB_BACKLOG ?? 1500);
// The primary and replica require it; it must never show in any output.
const PASSWORD = 'sentinel-test-s3cret';
// The sentinels require their own password (queue.redis_sentinel_password); never logged either.
const SENTINEL_PASSWORD = 'sentinels-own-pw';
const SHUTDOWN_MS = 5000;
const seed = testSeed();
const note = seedNote(seed);

describe(`bullmq: sentinel failover mid-drain ${note}`, () => {
  let sandbox: Sandbox;
  let set: SentinelSet;
  const dir = tempDir('feedsync-rb-sentinel-');

  beforeAll(async () => {
    set = await startSentinelSet({ password: PASSWORD, sentinelPassword: SENTINEL_PASSWORD });
    sandbox = await startSandbox({ seed, backlog: BACKLOG });
  }, 30_000);
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
    await set?.stop();
  });

  it('follows the promoted replica and loses nothing', { timeout: 150_000 }, async () => {
    const raw = bullmqConfig(sandbox, dir, set.url, {
      shutdownTimeoutMs: SHUTDOWN_MS,
      queue: { redis_sentinel_password: SENTINEL_PASSWORD },
      sinks: [{ name: 'file', type: 'jsonl', path: './changes-${WORKER_ID}.jsonl' }],
    });
    const configPath = writeConfig(dir, raw);
    const start = cliStarter(configPath);
    const procs = [start('poll', 'poll'), start('work', 'a'), start('work', 'b')];
    await waitStarted(...procs);

    const delivered = () => new Set(readJsonlFiles(dir, 'changes-').map((c) => c.key)).size;
    const trace = progressTrace(() => `delivered ${delivered()}`);
    const killAt = Math.floor(BACKLOG * 0.2);
    await eventually(() => delivered() >= killAt, 60_000, `${killAt} keys delivered ${note}`);
    // Live events keep arriving across the failover.
    const live = setInterval(() => {
      sandbox.generate('scheduling', 3);
      sandbox.generate('workflow', 3);
    }, 200);
    const killed = await set.killPrimary();
    const killedAt = Date.now();
    const atKill = delivered();
    // The failover: until the sentinels name another primary.
    await eventually(async () => (await set.primaryNow().catch(() => killed)) !== killed, 30_000, 'failover');
    const failoverMs = Date.now() - killedAt;
    // The stall: until a key not delivered before the kill arrives (a few in flight may land first).
    await eventually(() => delivered() > atKill + 20, 60_000, `delivery resumed ${note}`);
    const stallMs = Date.now() - killedAt;
    // The old primary comes back with its old data, as a lone primary, until the sentinels make it
    // a replica of the new one: nothing of feedsync may land there (it would be discarded).
    await set.restart(killed);
    const backAt = Date.now();
    await eventually(async () => (await set.roleOf(killed)) === 'slave', 30_000, 'old primary demoted');
    const loneMs = Date.now() - backAt;
    const atDemotion = delivered();
    await eventually(
      () => delivered() > atDemotion + 20,
      60_000,
      `delivery after the old primary returned ${note}`,
    );
    await sleep(2_000);
    clearInterval(live);
    const all = sandboxKeys(sandbox);
    await eventually(
      () => missingKeys(all, readJsonlFiles(dir, 'changes-')).length === 0,
      90_000,
      `every key after the failover ${note}`,
    ).catch((err: Error) => {
      trace.stop();
      const missing = missingKeys(all, readJsonlFiles(dir, 'changes-'));
      for (const p of procs) writeFileSync(join(dir, `output-${p.pid}.log`), p.text());
      throw new Error(
        `${err.message} (process output in ${dir}):\n${trace.text()}\n${missing.length} missing (e.g. ${missing.slice(0, 5).join(', ')})`,
      );
    });
    trace.stop();
    const lines = readJsonlFiles(dir, 'changes-');
    const copies = lines.length - new Set(lines.map((c) => c.key)).size;
    console.log(
      `sentinel failover: promoted after ${failoverMs} ms, delivery resumed ${stallMs} ms after the kill; ` +
        `old primary back as a lone primary for ${loneMs} ms, then a replica; lost 0, copies ${copies}`,
    );
    await expect(set.primaryNow()).resolves.toBe(set.replicaPort);
    // What the processes said, kept for a stall longer than the bound (seen under CPU load).
    if (stallMs > 2 * failoverMs + 1_000)
      for (const p of procs) writeFileSync(join(dir, `output-${p.pid}.log`), p.text());
    expect(
      stallMs,
      `stall (failover took ${failoverMs} ms; process output in ${dir}) ${note}`,
    ).toBeLessThanOrEqual(2 * failoverMs + 1_000);
    for (const p of procs) expect(p.exit, `process ${p.pid} still running ${note}`).toBeUndefined();
    for (const p of procs) {
      expect(p.text(), `the password is never logged ${note}`).not.toContain(PASSWORD);
      expect(p.text(), `nor the sentinels' ${note}`).not.toContain(SENTINEL_PASSWORD);
    }
    const exits = await stopGracefully(procs, SHUTDOWN_MS);
    for (const exit of exits) expect(exit, `graceful stop ${note}`).toMatchObject({ code: 0, signal: null });
  });
});
