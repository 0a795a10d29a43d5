// A real `feedsync run` child polls both services through a proxy that damages half the feed pages
// at random (seeded). Sampled all along: the process never dies, and the stored cursor never passes
// an event whose change is neither queued nor in the jsonl. Once the damage stops, every event the
// sandbox produced is in the jsonl, exactly as the sandbox describes it.
import { queuedKeys } from '../support/queued-keys.js';
import Database from 'better-sqlite3';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { rawConfig, readJsonl, tempDir, waitFor } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig, type CliProcess } from '../ops/support/cli.js';
import { startCorruptingProxy, type CorruptingProxy } from './support/corrupting-proxy.js';

const SEED = Number(process.env.FEEDSYNC_BAD_INPUT_SEED ?? Math.floor(Math.random() * 2 ** 31));
const REPLAY = `(proxy seed ${SEED}; replay: FEEDSYNC_BAD_INPUT_SEED=${SEED})`;
const SERVICES = ['scheduling', 'workflow'] as const;

const dir = tempDir('feedsync-bad-input-');
const jsonlPath = join(dir, 'changes.jsonl');
let sandbox: Sandbox;
let proxy: CorruptingProxy;
let run: CliProcess;
let storePath: string;

beforeAll(async () => {
  sandbox = await startSandbox({ seed: 61, backlog: 150, rate: 4 });
  proxy = await startCorruptingProxy(sandbox.schedulingBaseUrl, SEED);
  const raw = rawConfig(sandbox, dir, { source: { poll_interval_ms: 50 } });
  const sources = raw.sources as Record<string, unknown>[];
  sources[0]!.base_url = `${proxy.origin}/scheduling`;
  sources[0]!.format = 'xml';
  sources[1]!.base_url = `${proxy.origin}/workflow`;
  sources[1]!.format = 'json';
  // The proxy rewrites only feed pages: subject links still name the sandbox's own origin, which
  // an operator in this position lists as trusted (credentials go only to listed origins).
  const sandboxOrigin = new URL(sandbox.schedulingBaseUrl).origin;
  for (const source of sources) source.allowed_origins = [sandboxOrigin];
  raw.log = { level: 'warn' };
  storePath = (raw.store as { path: string }).path;
  run = spawnCli(['run'], { config: writeConfig(dir, raw) });
});

afterAll(async () => {
  await killAllCli();
  await proxy?.close();
  await sandbox?.close();
  rmSync(dir, { recursive: true, force: true });
});

function schemaVersion(path: string): number {
  const db = new Database(path, { readonly: true, fileMustExist: true });
  try {
    return db.pragma('user_version', { simple: true }) as number;
  } finally {
    db.close();
  }
}

/** Events at or below a cursor whose change is neither queued nor delivered (must be none). */
function skippedEvents(db: Database.Database): string[] {
  // Cursor first, then the queue, then the jsonl: a change leaves the queue only after it was
  // written, so anything committed by the time the cursor is read is found in one of the two.
  const { cursors, queued } = db.transaction(() => ({
    cursors: db.prepare('SELECT source, event_id FROM cursors').all() as {
      source: string;
      event_id: number;
    }[],
    queued: queuedKeys(db, 'file'),
  }))();
  const delivered = new Set(readJsonl(jsonlPath).map((c) => c.key));
  const missing: string[] = [];
  for (const { source, event_id } of cursors) {
    for (const e of sandbox.events(source as (typeof SERVICES)[number])) {
      const key = `${source}:${e.id}`;
      if (e.id <= event_id && !queued.has(key) && !delivered.has(key))
        missing.push(`${key} (cursor ${event_id})`);
    }
  }
  return missing;
}

it(`never crashes and never moves a cursor past an unqueued event while pages are corrupted ${REPLAY}`, async () => {
  // The file appears before the daemon's migrations commit: wait for the schema, not the file.
  await waitFor(
    () => existsSync(storePath) && schemaVersion(storePath) > 0,
    20_000,
    `the store's schema ${REPLAY}`,
  );
  const db = new Database(storePath, { readonly: true, fileMustExist: true });
  try {
    let samples = 0;
    const damaged = () => Object.values(proxy.damage).reduce((a, b) => a + b, 0);
    await waitFor(
      () => {
        expect(run.exit, `the daemon exited ${REPLAY}\n${run.text()}`).toBeUndefined();
        expect(skippedEvents(db), `events skipped ${REPLAY}`).toEqual([]);
        samples++;
        return damaged() >= 40 && samples >= 20;
      },
      40_000,
      `40 damaged feed responses ${REPLAY}: ${JSON.stringify(proxy.damage)}`,
    );
    // Both kinds of damage happened: broken bodies and replaced responses.
    expect(
      Object.keys(proxy.damage).some((k) => k.startsWith('replacement')),
      REPLAY,
    ).toBe(true);
    expect(
      Object.keys(proxy.damage).some((k) => !k.startsWith('replacement')),
      REPLAY,
    ).toBe(true);

    proxy.rate = 0;
    sandbox.setRate(0);
    const all = () => SERVICES.flatMap((s) => sandbox.events(s).map((e) => ({ key: `${s}:${e.id}`, e })));
    await waitFor(
      () => {
        expect(run.exit, `the daemon exited ${REPLAY}`).toBeUndefined();
        const have = new Set(readJsonl(jsonlPath).map((c) => c.key));
        return all().every(({ key }) => have.has(key));
      },
      30_000,
      `every sandbox event in the jsonl after the damage stopped ${REPLAY}`,
    );
    expect(skippedEvents(db)).toEqual([]);
  } finally {
    db.close();
  }

  // Nothing invented or garbled: each change is one real event, as the sandbox describes it.
  const byKey = new Map(
    SERVICES.flatMap((s) => sandbox.events(s).map((e) => [`${s}:${e.id}` as string, e] as const)),
  );
  for (const c of readJsonl(jsonlPath)) {
    const e = byKey.get(c.key);
    expect(e, `${c.key} is not a sandbox event ${REPLAY}`).toBeDefined();
    expect([c.event_type, c.occurred_at, c.changes]).toEqual([e!.event_type, e!.occurred_at, e!.changes]);
  }
  expect((await run.stop(10_000)).code).toBe(0);
});
