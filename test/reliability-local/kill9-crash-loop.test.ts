// Repeated kill -9 of `feedsync run` at seeded random moments, first while it catches up on a
// backlog, then while it follows live traffic, with a restart after each kill. Afterwards every
// event the sandbox produced is in the jsonl (duplicates allowed, always under the same key), every
// change matches the shipped schema, and the sqlite mirror's live rows equal the sandbox's state.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { readJsonl, tempDir } from '../support/harness.js';
import { killAllCli, type CliProcess } from '../support/process.js';
import { assertValidChange } from '../support/change-schema.js';
import {
  countKeys,
  expireLocksOf,
  keysBehindCursorNotQueued,
  mirrorDifferences,
  SEED,
  sandboxKeys,
  SERVICES,
  seededRandom,
  sleep,
  startRun,
  waitForAllKeys,
  writeRunConfig,
  type RunFiles,
} from './support.js';

// Several commits of up to 16 pages per source, so the kills land inside the catch-up.
const BACKLOG = 3000;
const LIVE_RATE = 20;

const t0 = Date.now();

describe(`kill -9 crash loop during catch-up and live traffic (RELIABILITY_SEED=${SEED})`, () => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await startSandbox({ seed: SEED, backlog: BACKLOG, rate: LIVE_RATE });
  });
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
  });

  /**
   * Starts a run, waits until `progress` more lines were delivered (0: none needed) plus
   * `delayMs`, then kills it with -9. Progress-based moments keep the catch-up kills inside the
   * catch-up however fast the machine is; the extra delay puts them anywhere in the pipeline.
   */
  async function killAt(
    files: RunFiles,
    progress: number,
    delayMs: number,
    phase: string,
    log: string[],
  ): Promise<void> {
    const p: CliProcess = await startRun(files);
    const target = readJsonl(files.jsonlPath).length + progress;
    const deadline = Date.now() + 20_000;
    while (progress > 0 && readJsonl(files.jsonlPath).length < target && Date.now() < deadline)
      await sleep(20);
    await sleep(delayMs);
    const delivered = readJsonl(files.jsonlPath).length;
    p.signal('SIGKILL');
    const exit = await p.waitForExit(5000);
    expect(exit.signal, `seed ${SEED}: the process had already exited\n${p.text().slice(-2000)}`).toBe(
      'SIGKILL',
    );
    log.push(
      `${((Date.now() - t0) / 1000).toFixed(1)}s ${phase}: killed ${delayMs} ms after +${progress} lines, ${delivered} delivered`,
    );
    expireLocksOf(files.storePath, p.pid);
    // The cursor rule holds at every crash: nothing at or below a stored cursor is unqueued.
    expect(keysBehindCursorNotQueued(sandbox, files), `seed ${SEED}; ${log.join('; ')}`).toEqual([]);
  }

  it('loses nothing and the mirror converges to the live state', async () => {
    const random = seededRandom(SEED);
    const files = writeRunConfig(sandbox, tempDir('feedsync-kill9-'));
    const log: string[] = [];

    // Catch-up: three kills while the backlog is being worked through.
    for (let i = 0; i < 3; i++) {
      const progress = 50 + Math.floor(random() * 250);
      await killAt(files, progress, Math.floor(random() * 200), 'catch-up', log);
    }
    expect(
      readJsonl(files.jsonlPath).length,
      `seed ${SEED}: the catch-up kills must land before the backlog is done; ${log.join('; ')}`,
    ).toBeLessThan(2 * BACKLOG);

    // Live: let one run catch up with what exists now, then kill twice while events keep arriving.
    const liveRun = await startRun(files);
    await waitForAllKeys(files.jsonlPath, sandboxKeys(sandbox), 90_000, `seed ${SEED}; ${log.join('; ')}`);
    liveRun.signal('SIGKILL');
    await liveRun.waitForExit(5000);
    expireLocksOf(files.storePath, liveRun.pid);
    const beforeLive = sandboxKeys(sandbox).size;
    for (let i = 0; i < 2; i++) await killAt(files, 0, 200 + Math.floor(random() * 1500), 'live', log);
    expect(sandboxKeys(sandbox).size, 'live events arrived during the live kills').toBeGreaterThan(
      beforeLive,
    );

    // Final: stop the traffic, run until every key the sandbox produced has been delivered.
    sandbox.setRate(0);
    const expected = sandboxKeys(sandbox);
    const final = await startRun(files);
    await waitForAllKeys(files.jsonlPath, expected, 90_000, `seed ${SEED}; ${log.join('; ')}`);
    // Both sinks drain independently: wait for the mirror's queue too, via a graceful stop.
    await waitForMirrorToSettle(files, sandbox);
    expect(await final.stop(8000)).toEqual({ code: 0, signal: null });

    const changes = readJsonl(files.jsonlPath);
    for (const c of changes) assertValidChange(c);
    const counts = countKeys(changes);
    expect(
      [...counts.keys()].filter((k) => !expected.has(k)),
      `seed ${SEED}: unknown keys`,
    ).toEqual([]);
    for (const c of changes) expect(c.key).toBe(`${c.source}:${c.event_id}`);
    // The comparison below is only meaningful over a substantial live state.
    for (const service of SERVICES)
      expect(Object.keys(sandbox.liveState(service)).length, `${service} live subjects`).toBeGreaterThan(50);
    expect(mirrorDifferences(sandbox, files.mirrorPath), `seed ${SEED}; ${log.join('; ')}`).toEqual([]);
  }, 150_000);
});

/** The mirror may lag the jsonl by a few deliveries: poll until it matches or time runs out. */
async function waitForMirrorToSettle(files: RunFiles, sandbox: Sandbox): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    if (mirrorDifferences(sandbox, files.mirrorPath).length === 0) return;
    await sleep(200);
  }
}
