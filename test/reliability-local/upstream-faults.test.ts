// One in five upstream requests misbehaves (every fault kind: 5xx, 429 with and without
// Retry-After, hangs, truncated and malformed bodies, HTML error pages). `feedsync run` must keep
// running, deliver every event, and never store a cursor ahead of what it queued — checked on
// snapshots taken while it runs and once more at the end.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FAULT_KINDS, startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { readJsonl, tempDir } from '../support/harness.js';
import { killAllCli } from '../support/process.js';
import { assertValidChange } from '../support/change-schema.js';
import {
  countKeys,
  keysBehindCursorNotQueued,
  missingKeys,
  readCursors,
  SEED,
  sandboxKeys,
  SERVICES,
  sleep,
  startRun,
  writeRunConfig,
} from './support.js';

// Enough requests that every service sees well over 10 faults at 20% whatever the seed (the
// scheduling feed embeds most subjects: about one request per 7 events).
const BACKLOG = 1000;

describe(`upstream faults at rate 0.2 (RELIABILITY_SEED=${SEED})`, () => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await startSandbox({
      seed: SEED,
      backlog: BACKLOG,
      faultRate: 0.2,
      faultKinds: [...FAULT_KINDS],
    });
  });
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
  });

  it('never crashes, loses nothing, and keeps the cursor behind the queue', async () => {
    // Hangs are cut short by a small per-request timeout.
    const files = writeRunConfig(sandbox, tempDir('feedsync-faults-'), { source: { timeout_ms: 500 } });
    const expected = sandboxKeys(sandbox);
    const p = await startRun(files);

    const deadline = Date.now() + 120_000;
    let snapshots = 0;
    let missing = [...expected];
    while (missing.length > 0 && Date.now() < deadline) {
      expect(p.exit, `seed ${SEED}: feedsync exited under faults\n${p.text().slice(-3000)}`).toBeUndefined();
      const lost = keysBehindCursorNotQueued(sandbox, files);
      expect(lost, `seed ${SEED}: cursor ahead of the queue (snapshot ${snapshots})`).toEqual([]);
      snapshots++;
      missing = missingKeys(expected, countKeys(readJsonl(files.jsonlPath)));
      await sleep(250);
    }
    expect(missing.slice(0, 20), `seed ${SEED}: ${missing.length} keys never delivered`).toEqual([]);

    // The faults really happened, of every kind, on both services.
    const stats = sandbox.stats();
    for (const service of SERVICES) {
      const injected = Object.values(stats[service].faults).reduce((a, b) => a + b, 0);
      expect(injected, `${service} faults`).toBeGreaterThan(10);
    }
    const kindsSeen = FAULT_KINDS.filter((k) => SERVICES.some((s) => stats[s].faults[k] > 0));
    expect(kindsSeen).toEqual([...FAULT_KINDS]);
    // ...and were noticed and logged (with the source), not silently swallowed.
    expect(p.logs().some((l) => typeof l.source === 'string' && (l.level ?? 0) >= 40)).toBe(true);

    expect(p.exit, `seed ${SEED}: feedsync exited under faults`).toBeUndefined();
    expect(await p.stop(8000)).toEqual({ code: 0, signal: null });

    const cursors = readCursors(files.storePath);
    for (const service of SERVICES) {
      const newest = Math.max(...sandbox.events(service).map((e) => e.id));
      expect(cursors.get(service), `${service} cursor`).toBeLessThanOrEqual(newest);
    }
    expect(keysBehindCursorNotQueued(sandbox, files)).toEqual([]);
    for (const c of readJsonl(files.jsonlPath)) assertValidChange(c);
    expect(snapshots).toBeGreaterThan(3);
  });
});
