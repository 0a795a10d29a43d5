// The postgres mirror under a real `feedsync run` child against the sandbox: kill -9 mid-drain and
// restart, and PostgreSQL itself restarted while changes are being delivered. Afterwards every
// change is logged once, the mirror's live rows equal the sandbox's final state, and every row
// (tombstones included) equals the sqlite mirror's, which the same run fed.
import Database from 'better-sqlite3';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { rawConfig, readJsonl, tempDir } from '../support/harness.js';
import { startPostgres, type PostgresServer } from '../support/postgres.js';
import { killAllCli, writeConfig, type CliProcess } from '../support/process.js';
import {
  deepEqual,
  expireLocksOf,
  liveStateDifferences,
  SEED,
  sandboxKeys,
  SERVICES,
  seededRandom,
  sleep,
  startRun,
  waitForAllKeys,
} from '../reliability-local/support.js';

const BACKLOG = 1500;

interface PgRunFiles {
  dir: string;
  configPath: string;
  storePath: string;
  jsonlPath: string;
  mirrorPath: string;
  schema: string;
}

let server: PostgresServer;
let sandbox: Sandbox;
let admin: pg.Pool;

beforeAll(async () => {
  [server, sandbox] = await Promise.all([
    startPostgres(),
    startSandbox({ seed: SEED, backlog: BACKLOG, rate: 0 }),
  ]);
  admin = adminPool();
});

function adminPool(): pg.Pool {
  const pool = new pg.Pool({ connectionString: server.url, max: 2 });
  // Its idle connections are closed by the restarts (the test then opens a new pool).
  pool.on('error', () => undefined);
  return pool;
}
const dirs: string[] = [];
afterAll(async () => {
  await killAllCli();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  await admin?.end();
  await sandbox?.close();
  server?.stop();
});

/** `feedsync run` on both services into a jsonl file, a sqlite mirror and the postgres mirror. */
function writePgRunConfig(schema: string): PgRunFiles {
  const dir = tempDir(`feedsync-pg-${schema}-`);
  dirs.push(dir);
  const files = {
    dir,
    schema,
    storePath: join(dir, 'feedsync.db'),
    jsonlPath: join(dir, 'changes.jsonl'),
    mirrorPath: join(dir, 'mirror.db'),
  };
  const raw = rawConfig(sandbox, dir, {
    source: { poll_interval_ms: 100, timeout_ms: 2000 },
    sinks: [
      { name: 'file', type: 'jsonl', path: files.jsonlPath },
      { name: 'mirror', type: 'sqlite', path: files.mirrorPath },
      // Short statement timeout: a delivery caught by the restart fails fast and is retried.
      { name: 'pg', type: 'postgres', url: server.url, schema, changes: true, statement_timeout_ms: 5000 },
    ],
    // Retries enough to outlast a restart with the tests' short backoff (production's backoff is
    // seconds to minutes: the default 10 attempts outlast any restart).
    queue: { concurrency: 4, attempts: 100 },
  });
  (raw.sources as Record<string, unknown>[])[1]!.format = 'xml';
  raw.log = { level: 'info' };
  return { ...files, configPath: writeConfig(dir, raw) };
}

/** How many changes the postgres sink has logged so far. */
async function loggedCount(schema: string): Promise<number> {
  const exists = await admin.query('SELECT to_regclass($1) AS t', [`${schema}.changes`]);
  if ((exists.rows[0] as { t: string | null }).t === null) return 0;
  return (await admin.query(`SELECT count(*)::int AS n FROM ${schema}.changes`)).rows[0].n as number;
}

async function loggedKeys(schema: string): Promise<string[]> {
  const exists = await admin.query('SELECT to_regclass($1) AS t', [`${schema}.changes`]);
  if ((exists.rows[0] as { t: string | null }).t === null) return [];
  return (await admin.query(`SELECT key FROM ${schema}.changes`)).rows.map((r: { key: string }) => r.key);
}

interface MirrorRow {
  subject: Record<string, unknown> | null;
  last_event_id: number;
  deleted: boolean;
}

async function pgRows(schema: string): Promise<Map<string, MirrorRow>> {
  const rows = (
    await admin.query(
      `SELECT subject_url, subject, last_event_id::float8 AS id, deleted FROM ${schema}.subjects`,
    )
  ).rows as { subject_url: string; subject: Record<string, unknown> | null; id: number; deleted: boolean }[];
  return new Map(
    rows.map((r) => [r.subject_url, { subject: r.subject, last_event_id: r.id, deleted: r.deleted }]),
  );
}

function sqliteRows(path: string): Map<string, MirrorRow> {
  const db = new Database(path, { readonly: true, fileMustExist: true });
  try {
    const rows = db.prepare('SELECT subject_url, subject, last_event_id, deleted FROM subjects').all() as {
      subject_url: string;
      subject: string | null;
      last_event_id: number;
      deleted: number;
    }[];
    return new Map(
      rows.map((r) => [
        r.subject_url,
        {
          subject: JSON.parse(r.subject ?? 'null') as Record<string, unknown> | null,
          last_event_id: r.last_event_id,
          deleted: r.deleted === 1,
        },
      ]),
    );
  } finally {
    db.close();
  }
}

/** The postgres mirror's live rows against the sandbox's live state, as for the sqlite mirror. */
async function pgMirrorDifferences(schema: string): Promise<string[]> {
  const live = [...(await pgRows(schema))].filter(([, r]) => !r.deleted);
  return liveStateDifferences(sandbox, new Map(live.map(([url, r]) => [url, { subject: r.subject ?? {} }])));
}

/** Every row of the two mirrors, tombstones included, equal. */
async function mirrorsDiffer(files: PgRunFiles): Promise<string[]> {
  const a = await pgRows(files.schema);
  const b = sqliteRows(files.mirrorPath);
  const diffs: string[] = [];
  for (const [url, row] of b) {
    const other = a.get(url);
    if (!other) diffs.push(`postgres lacks ${url}`);
    else if (!deepEqual(other, row))
      diffs.push(`${url}: postgres ${JSON.stringify(other)} != sqlite ${JSON.stringify(row)}`);
  }
  for (const url of a.keys()) if (!b.has(url)) diffs.push(`sqlite lacks ${url}`);
  return diffs;
}

/** What a stalled run was doing: its exit, its last warnings and errors, stderr, the jsonl's size. */
function diagnose(run: CliProcess, files: PgRunFiles): string {
  const warnings = run
    .logs()
    .filter((l) => (l.level as number) >= 40)
    .slice(-10)
    .map((l) => JSON.stringify(l));
  return [
    `exit ${JSON.stringify(run.exit ?? null)}; jsonl ${readJsonl(files.jsonlPath).length} lines`,
    ...warnings,
    ...run.stderr().slice(-20),
  ].join('\n');
}

/** Runs a final `feedsync run` until every sink holds everything, stops it gracefully and checks. */
async function finishAndCheck(files: PgRunFiles, context: string): Promise<void> {
  const expected = sandboxKeys(sandbox);
  const final = await startRun(files);
  await waitForAllKeys(files.jsonlPath, expected, 60_000, context);
  const deadline = Date.now() + 30_000;
  let missing: string[] = [];
  let diffs: string[] = [];
  while (Date.now() < deadline) {
    const logged = new Set(await loggedKeys(files.schema));
    missing = [...expected].filter((k) => !logged.has(k));
    diffs =
      missing.length === 0
        ? [...(await pgMirrorDifferences(files.schema)), ...(await mirrorsDiffer(files))]
        : [];
    if (missing.length === 0 && diffs.length === 0) break;
    await sleep(200);
  }
  expect(await final.stop(8000)).toEqual({ code: 0, signal: null });
  expect(missing.slice(0, 10), `${context}: keys never logged in postgres`).toEqual([]);
  expect(diffs.slice(0, 10), context).toEqual([]);
  // Each change logged exactly once (the key is the primary key), none unknown.
  const logged = await loggedKeys(files.schema);
  expect(logged.length).toBe(expected.size);
  for (const service of SERVICES)
    expect(Object.keys(sandbox.liveState(service)).length, `${service} live subjects`).toBeGreaterThan(50);
  const tombstones = (
    await admin.query(`SELECT count(*)::int AS n FROM ${files.schema}.subjects WHERE deleted`)
  ).rows[0];
  expect((tombstones as { n: number }).n, 'the run saw deletions').toBeGreaterThan(0);
}

describe(`postgres mirror under a real feedsync run (RELIABILITY_SEED=${SEED})`, () => {
  it('kill -9 mid-drain and restart: nothing lost, the mirror equals the sandbox and the sqlite mirror', async () => {
    const random = seededRandom(SEED);
    const files = writePgRunConfig('crash');
    const log: string[] = [];
    for (let i = 0; i < 3; i++) {
      const p = await startRun(files);
      const target = (await loggedCount(files.schema)) + 150 + Math.floor(random() * 400);
      const deadline = Date.now() + 20_000;
      while ((await loggedCount(files.schema)) < target && Date.now() < deadline) await sleep(20);
      await sleep(Math.floor(random() * 150));
      const logged = await loggedCount(files.schema);
      p.signal('SIGKILL');
      const exit = await p.waitForExit(5000);
      expect(exit.signal, `seed ${SEED}: the process had already exited\n${p.text().slice(-2000)}`).toBe(
        'SIGKILL',
      );
      log.push(`kill ${i + 1} at ${logged} changes in postgres`);
      expireLocksOf(files.storePath, p.pid);
      // Events that arrive between runs, with current timestamps.
      sandbox.generate(i % 2 === 0 ? 'workflow' : 'scheduling', 40);
    }
    expect(
      await loggedCount(files.schema),
      `seed ${SEED}: the kills must land before the drain is done; ${log.join('; ')}`,
    ).toBeLessThan(sandboxKeys(sandbox).size);
    await finishAndCheck(files, `seed ${SEED}; ${log.join('; ')}`);
  }, 90_000);

  it('PostgreSQL restarted while delivering: deliveries resume, nothing lost', async () => {
    const files = writePgRunConfig('restart');
    const run = await startRun(files);
    const log: string[] = [];
    try {
      for (let i = 0; i < 2; i++) {
        const target = (await loggedCount(files.schema)) + 300;
        const deadline = Date.now() + 20_000;
        while ((await loggedCount(files.schema)) < target && Date.now() < deadline) await sleep(20);
        const before = await loggedCount(files.schema);
        // Every connection (the sink's and ours) is closed.
        await server.restart();
        await admin.end().catch(() => undefined);
        admin = adminPool();
        log.push(`restart ${i + 1} at ${before} changes in postgres`);
      }
      expect(
        await loggedCount(files.schema),
        `the restarts must land before the drain is done; ${log.join('; ')}`,
      ).toBeLessThan(sandboxKeys(sandbox).size);
      // The run carries on: every change reaches postgres without a restart of feedsync.
      const expected = sandboxKeys(sandbox);
      const deadline = Date.now() + 60_000;
      while (Date.now() < deadline && (await loggedCount(files.schema)) < expected.size) await sleep(100);
      expect(await loggedCount(files.schema), `${log.join('; ')}\n${diagnose(run, files)}`).toBe(
        expected.size,
      );
      // The same process delivered before and after the restarts: nothing had to restart feedsync.
      expect(run.exit, 'feedsync run kept running').toBeUndefined();
    } finally {
      await run.stop(8000);
    }
    await finishAndCheck(files, log.join('; '));
  }, 90_000);
});
