// Two `feedsync run` processes on one store: the second waits for the first one's store lease
// (and says so, per source), and once the first is killed with -9 it takes over when the lease
// expires (15 s) — new upstream events then reach the sink through the second process.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { STORE_LEASE_TTL_MS as LOCK_TTL_MS } from '../../src/lease/store-lease.js';
import { tempDir } from '../support/harness.js';
import { killAllCli } from '../support/process.js';
import { SEED, sandboxKeys, SERVICES, startRun, waitForAllKeys, writeRunConfig } from './support.js';

const waiting = (msg: unknown, service: string): boolean =>
  typeof msg === 'string' && msg.startsWith(`waiting for source ${service} held by `);

describe(`source lock between two run processes (RELIABILITY_SEED=${SEED})`, () => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await startSandbox({ seed: SEED, backlog: 50 });
  });
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
  });

  it('the second run waits, then takes over after the first is killed -9', async () => {
    const files = writeRunConfig(sandbox, tempDir('feedsync-lock-'));
    const first = await startRun(files);
    await waitForAllKeys(files.jsonlPath, sandboxKeys(sandbox), 30_000, `seed ${SEED}`);

    const second = await startRun(files);
    for (const service of SERVICES)
      await second.waitForLog(
        (l) => waiting(l.msg, service) && l.source === service,
        5000,
        `the second run to say it waits for ${service}`,
      );

    first.signal('SIGKILL');
    const killedAt = Date.now();
    await first.waitForExit(5000);
    for (const service of SERVICES) sandbox.generate(service, 10);
    const expected = sandboxKeys(sandbox);
    await waitForAllKeys(files.jsonlPath, expected, LOCK_TTL_MS + 15_000, `seed ${SEED}: takeover`);
    // The lease, not anything sooner, let it in: a takeover before expiry would mean two pollers.
    expect(Date.now() - killedAt).toBeGreaterThanOrEqual(LOCK_TTL_MS - 6000);
    expect(second.exit).toBeUndefined();
    expect(await second.stop(8000)).toEqual({ code: 0, signal: null });
  });
});
