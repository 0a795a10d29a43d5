// Another process holding the store's write lock (a `dlq retry`, a standby's claim, an operator's
// sqlite3 shell) must not stop the daemon's event loop: better-sqlite3 waits for a lock by blocking
// the thread, and with a 5 s busy timeout /healthz went unanswered for that long on every write.
// The daemon now waits briefly and retries busy writes asynchronously: /healthz answers throughout,
// and nothing is lost once the lock is released.
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { readJsonl, tempDir } from '../support/harness.js';
import { killAllCli } from '../support/process.js';
import { SEED, sandboxKeys, sleep, startRun, waitForAllKeys, writeRunConfig } from './support.js';

const HOLD_MS = 3000;

describe(`a store write lock held by another process (RELIABILITY_SEED=${SEED})`, () => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await startSandbox({ seed: SEED, backlog: 600 });
  });
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
  });

  it('keeps /healthz answering while the lock is held, and delivers everything after', async () => {
    const files = writeRunConfig(sandbox, tempDir('feedsync-busy-'));
    const run = await startRun(files);
    const port = (await run.waitForLog((l) => l.msg === 'feedsync started', 1000)).metrics_port;
    const deadline = Date.now() + 30_000;
    while (readJsonlSafe(files.jsonlPath) < 100 && Date.now() < deadline) await sleep(20);

    const holder = new Database(files.storePath, { timeout: 5000 });
    holder.exec('BEGIN IMMEDIATE');
    const latencies: number[] = [];
    const until = Date.now() + HOLD_MS;
    while (Date.now() < until) {
      const t0 = performance.now();
      const res = await fetch(`http://127.0.0.1:${String(port)}/healthz`, {
        signal: AbortSignal.timeout(5000),
      });
      latencies.push(performance.now() - t0);
      expect(res.status).toBe(200);
      await sleep(50);
    }
    holder.exec('ROLLBACK');
    holder.close();

    expect(
      Math.max(...latencies),
      `/healthz latencies while locked: ${latencies.map(Math.round).join(',')}`,
    ).toBeLessThan(1000);
    await waitForAllKeys(files.jsonlPath, sandboxKeys(sandbox), 60_000, `seed ${SEED}`);
    expect(run.exit).toBeUndefined();
    expect(await run.stop(8000)).toEqual({ code: 0, signal: null });
  });
});

function readJsonlSafe(path: string): number {
  try {
    return readJsonl(path).length;
  } catch {
    return 0;
  }
}
