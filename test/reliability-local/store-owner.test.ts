// One owner per store (src/lease/store-lease.ts), with real processes:
// - a second `run` on the same store waits as a standby: it moves no row of the live process and
//   delivers nothing twice (before the store lease, ~1,369 of ~1,600 changes were delivered twice);
// - a `run` frozen (SIGSTOP) past the lease while a standby waits: the standby takes over, the
//   frozen one writes nothing when resumed and exits 1. For the local queue that is a crash: the
//   copies are what the frozen process held in memory (its logged pages, at most its memory
//   window per sink, docs/local-queue.md), as after kill -9.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { readJsonl, tempDir } from '../support/harness.js';
import { killAllCli } from '../support/process.js';
import {
  countKeys,
  SEED,
  sandboxKeys,
  SERVICES,
  sleep,
  startRun,
  waitForAllKeys,
  writeRunConfig,
} from './support.js';

const TTL_MS = 3000;

describe(`one owner per store (RELIABILITY_SEED=${SEED})`, () => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await startSandbox({ seed: SEED, backlog: 800 });
  });
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
  });

  it(
    'a second run on the same store waits as a standby, is not ready, and delivers nothing twice',
    { timeout: 120_000 },
    async () => {
      const files = writeRunConfig(sandbox, tempDir('feedsync-owner-'), { queue: { lease_ttl_ms: TTL_MS } });
      const first = await startRun(files);
      const second = await startRun(files);
      for (const service of SERVICES)
        await second.waitForLog(
          (l) => typeof l.msg === 'string' && l.msg.startsWith(`waiting for source ${service} held by `),
          5000,
          `the standby to say it waits for ${service}`,
        );
      const port = (await second.waitForLog((l) => l.msg === 'feedsync started', 1000)).metrics_port;
      const ready = await fetch(`http://127.0.0.1:${String(port)}/readyz`);
      expect(ready.status).toBe(503);
      expect(await ready.text()).toContain('store_owner');

      const changes = await waitForAllKeys(files.jsonlPath, sandboxKeys(sandbox), 60_000, `seed ${SEED}`);
      await sleep(500);
      const copies = [...countKeys(readJsonl(files.jsonlPath))].filter(([, n]) => n > 1);
      expect(copies, `seed ${SEED}: delivered more than once`).toEqual([]);
      expect(changes.length).toBeGreaterThan(0);
      expect(second.exit).toBeUndefined();
      expect(await first.stop(8000)).toEqual({ code: 0, signal: null });
      expect(await second.stop(8000)).toEqual({ code: 0, signal: null });
    },
  );

  it(
    'a run frozen past its lease writes nothing once resumed and exits 1; copies are bounded as after a crash',
    { timeout: 150_000 },
    async () => {
      const files = writeRunConfig(sandbox, tempDir('feedsync-freeze-'), {
        queue: { lease_ttl_ms: TTL_MS },
        concurrency: 2,
      });
      const frozen = await startRun(files);
      const standby = await startRun(files);
      // Freeze it mid-drain.
      await waitForPartial(files.jsonlPath, 200);
      frozen.signal('SIGSTOP');
      await waitForAllKeys(files.jsonlPath, sandboxKeys(sandbox), 60_000, `seed ${SEED}: the standby drains`);
      frozen.signal('SIGCONT');
      const exit = await frozen.waitForExit(15_000);
      expect(exit.code, frozen.text().slice(-2000)).toBe(1);
      expect(frozen.text()).toContain('no longer owns the store');

      await sleep(500);
      const copies = [...countKeys(readJsonl(files.jsonlPath))].filter(([, n]) => n > 1);
      // As after a crash: at most the memory window (1,000 changes per sink) is delivered again.
      expect(copies.length, `seed ${SEED}: copies ${JSON.stringify(copies.slice(0, 5))}`).toBeLessThanOrEqual(
        1000,
      );
      expect(standby.exit).toBeUndefined();
      expect(await standby.stop(8000)).toEqual({ code: 0, signal: null });
    },
  );
});

async function waitForPartial(jsonlPath: string, n: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    try {
      if (readJsonl(jsonlPath).length >= n) return;
    } catch {
      // not written yet
    }
    await sleep(20);
  }
  throw new Error(`fewer than ${n} changes in ${jsonlPath} after 30 s`);
}
