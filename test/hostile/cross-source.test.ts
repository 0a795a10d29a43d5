// One source cannot touch another's data (issue #28 item 4): two sources feed one sqlite mirror,
// and source A — hostile, or misconfigured — lists events about source B's subject URLs: a
// deletion (never fetched, so never held to A's origins), and updates with embedded subjects at
// the largest safe event ids. The mirror keeps A's changes in A's rows; B's rows stay intact, and
// B's later changes still apply.
import Database from 'better-sqlite3';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { tempDir } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig } from '../support/process.js';
import {
  DaemonRun,
  expectHealthy,
  Feed,
  healthyReply,
  makeEvents,
  PASSWORD,
  Servers,
  sleep,
  subjectPath,
  USERNAME,
  type EventSpec,
} from './support.js';

const servers = new Servers();
const dirs: string[] = [];
afterEach(async () => {
  await killAllCli();
  await servers.closeAll();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

interface MirrorRow {
  source: string;
  subject_url: string;
  last_event_id: number;
  last_key: string;
  deleted: number;
  name: string | null;
}

/** The mirror's rows, read by another connection (as an operator's sqlite3 would). */
function mirrorRows(path: string): MirrorRow[] {
  let db: Database.Database | undefined;
  try {
    db = new Database(path, { readonly: true, fileMustExist: true });
    return db
      .prepare(
        `SELECT source, subject_url, last_event_id, last_key, deleted, json_extract(subject, '$.name') AS name
         FROM subjects ORDER BY subject_url, source`,
      )
      .all() as MirrorRow[];
  } catch {
    return []; // not created yet
  } finally {
    db?.close();
  }
}

it("source A's events about source B's subjects (a deletion, the largest ids) leave B's rows intact and current", async () => {
  const MAX = Number.MAX_SAFE_INTEGER;
  const titles = [501, 502, 503];
  // B's feed: three titles, then (once A has struck) one more update of each.
  const bEvents = makeEvents('scheduling', 1, 6, { subjects: 3, subjectBase: 501 });
  let bFeed = new Feed('scheduling', bEvents.slice(0, 3));
  const b = await servers.start({ name: 'b', handler: (ctx) => healthyReply(ctx, bFeed) });
  const bUrl = (t: number) => b.url(subjectPath('scheduling', t));
  // A's feed: empty, until it lists B's subject URLs as its own.
  const aHostile: EventSpec[] = [
    { id: 7, type: 'title_deleted', subject: bUrl(501) },
    { id: MAX - 1, type: 'title_updated', subject: bUrl(502), changes: 'name' },
    { id: MAX, type: 'title_updated', subject: bUrl(503), changes: 'name' },
  ];
  let aFeed = new Feed('scheduling', []);
  const a = await servers.start({ name: 'a', handler: (ctx) => healthyReply(ctx, aFeed) });

  const dir = tempDir('feedsync-cross-source-');
  dirs.push(dir);
  const jsonlPath = join(dir, 'changes.jsonl');
  const mirrorPath = join(dir, 'mirror.db');
  const source = (name: string, origin: string) => ({
    name,
    service: 'scheduling',
    base_url: origin,
    username: USERNAME,
    password: PASSWORD,
    start_from: 'earliest',
    poll_interval_ms: 100,
    timeout_ms: 5000,
  });
  const configPath = writeConfig(dir, {
    shutdown_timeout_ms: 5000,
    store: { path: join(dir, 'feedsync.db') },
    queue: { driver: 'local', backoff_ms: 50, max_backoff_ms: 1000 },
    sources: [source('a', a.origin), source('b', b.origin)],
    sinks: [
      { name: 'file', type: 'jsonl', path: jsonlPath },
      { name: 'mirror', type: 'sqlite', path: mirrorPath },
    ],
    http: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
  });
  const proc = spawnCli(['run'], {
    config: configPath,
    echo: process.env.HOSTILE_ECHO ? '[cross]' : undefined,
  });
  const started = await proc.waitForLog((l) => l.msg === 'feedsync started', 20_000, '"feedsync started"');
  const run = new DaemonRun(proc, started.metrics_port as number, dir, 'b', jsonlPath, 'cross-source');

  /** Waits until `done` holds for the mirror's rows; the error shows them. */
  const waitForMirror = async (what: string, done: (rows: MirrorRow[]) => boolean): Promise<MirrorRow[]> => {
    const deadline = Date.now() + 15_000;
    let rows = mirrorRows(mirrorPath);
    while (!done(rows) && Date.now() < deadline && !proc.exit) {
      await sleep(100);
      rows = mirrorRows(mirrorPath);
    }
    expect(done(rows), `${what}; the mirror holds ${JSON.stringify(rows, null, 1)}`).toBe(true);
    return rows;
  };
  const bRow = (rows: MirrorRow[], t: number) =>
    rows.find((r) => r.source === 'b' && r.subject_url === bUrl(t));
  const delivered = (keys: string[]) => {
    const got = new Set(run.changes().map((c) => c.key));
    return keys.every((k) => got.has(k));
  };

  try {
    await waitForMirror("B's three titles mirrored", (rows) =>
      titles.every((t, i) => bRow(rows, t)?.last_event_id === i + 1),
    );

    aFeed = new Feed('scheduling', aHostile);
    const aKeys = aHostile.map((e) => `a:${e.id}`);
    const deadline = Date.now() + 15_000;
    while (!delivered(aKeys) && Date.now() < deadline && !proc.exit) await sleep(100);
    expect(delivered(aKeys), `A's changes delivered (${aKeys.join(', ')})`).toBe(true);

    bFeed = new Feed('scheduling', bEvents);
    const rows = await waitForMirror("B's later updates applied to B's rows", (r) =>
      titles.every((t, i) => bRow(r, t)?.last_event_id === i + 4),
    );
    for (const [i, t] of titles.entries())
      expect(bRow(rows, t), `B's row of title ${t}`).toMatchObject({
        last_key: `b:${i + 4}`,
        deleted: 0,
        name: `title ${t}`,
      });
    // A's changes are kept, as A's: a tombstone and two rows at A's own positions.
    expect(
      rows.filter((r) => r.source === 'a').map((r) => [r.subject_url, r.last_event_id, r.deleted]),
    ).toEqual([
      [bUrl(501), 7, 1],
      [bUrl(502), MAX - 1, 0],
      [bUrl(503), MAX, 0],
    ]);
  } finally {
    expectHealthy(run, await run.finish());
  }
});
