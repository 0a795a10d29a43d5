// A graceful stop (SIGTERM) in the middle of catching up on a large backlog, then a restart: the
// process exits 0 within shutdown_timeout_ms, and every sandbox event ends up in the jsonl exactly
// once — a graceful stop may neither lose a change nor cause a redelivery.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { readJsonl, tempDir } from '../support/harness.js';
import { killAllCli } from '../support/process.js';
import { assertValidChange } from '../support/change-schema.js';
import {
  countKeys,
  SEED,
  sandboxKeys,
  seededRandom,
  sleep,
  startRun,
  waitForAllKeys,
  writeRunConfig,
} from './support.js';

const SHUTDOWN_TIMEOUT_MS = 5000;

describe(`SIGTERM mid catch-up, then restart (RELIABILITY_SEED=${SEED})`, () => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await startSandbox({ seed: SEED, backlog: 2000 });
  });
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
  });

  it('exits 0 in time and, after a restart, has delivered every event exactly once', async () => {
    const random = seededRandom(SEED);
    const files = writeRunConfig(sandbox, tempDir('feedsync-sigterm-'), {
      shutdownTimeoutMs: SHUTDOWN_TIMEOUT_MS,
    });
    const expected = sandboxKeys(sandbox);
    expect(expected.size).toBe(4000);

    const first = await startRun(files);
    // Stop somewhere inside the catch-up: after some changes have landed, well before all of them.
    const stopAfter = 200 + Math.floor(random() * 1200);
    const deadline = Date.now() + 20_000;
    while (readJsonl(files.jsonlPath).length < stopAfter && Date.now() < deadline) await sleep(20);
    const before = readJsonl(files.jsonlPath).length;
    expect(before, `seed ${SEED}: the stop must land mid catch-up`).toBeLessThan(expected.size);

    const signalledAt = Date.now();
    first.signal('SIGTERM');
    const exit = await first.waitForExit(SHUTDOWN_TIMEOUT_MS + 1000);
    const took = Date.now() - signalledAt;
    expect(exit, `seed ${SEED}\n${first.text().slice(-3000)}`).toEqual({ code: 0, signal: null });
    expect(took).toBeLessThan(SHUTDOWN_TIMEOUT_MS);
    expect(first.logs().some((l) => l.msg === 'feedsync stopped')).toBe(true);

    const second = await startRun(files);
    const changes = await waitForAllKeys(files.jsonlPath, expected, 60_000, `seed ${SEED}`);
    await second.stop(SHUTDOWN_TIMEOUT_MS + 1000);

    const all = readJsonl(files.jsonlPath);
    const duplicates = [...countKeys(all)].filter(([, n]) => n > 1).map(([k]) => k);
    expect(duplicates, `seed ${SEED}: duplicated after a graceful stop`).toEqual([]);
    expect(all.length).toBe(expected.size);
    for (const c of changes) assertValidChange(c);
  });
});
