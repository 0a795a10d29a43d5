import Database from 'better-sqlite3';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { SqliteSinkConfig } from '../../src/config/types.js';
import type { Change } from '../../src/core/change.js';
import type { Sink } from '../../src/sinks/sink.js';
import { openSqliteSink } from '../../src/sinks/sqlite-mirror.js';
import { MIRROR_VERSION } from '../../src/sinks/sqlite-mirror-schema.js';
import { describeSinkConformance } from '../../src/testing/conformance.js';
import { BASE, makeChange, nextEventId, testContext } from './support/make-change.js';

const filter = { sources: [], services: [], event_types: [], resource_types: [] };
let root: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'feedsync-mirror-'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

function config(path: string): SqliteSinkConfig {
  return { name: 'sqlite', type: 'sqlite', path, filter };
}

interface Row {
  subject_url: string;
  resource_type: string;
  service: string;
  source: string;
  subject: string | null;
  last_event_id: number;
  last_key: string;
  updated_at: string;
  deleted: number;
}

/** A second, independent connection: what an operator's `sqlite3` would see. */
function withReader<T>(path: string, read: (db: Database.Database) => T): T {
  const db = new Database(path, { readonly: true });
  try {
    return read(db);
  } finally {
    db.close();
  }
}

describe('sqlite mirror sink', () => {
  const conformancePath = () => join(root, 'conformance', 'mirror.db');
  let locker: Database.Database | undefined;
  describeSinkConformance('sqlite', {
    open: () => openSqliteSink(config(conformancePath()), testContext('sqlite', root), { busyTimeoutMs: 50 }),
    // The mirror keeps one row per subject; every conformance change has its own subject.
    delivered: async () =>
      withReader(conformancePath(), (db) =>
        db
          .prepare('SELECT last_key FROM subjects ORDER BY rowid')
          .pluck()
          .all()
          .map((k) => k as string),
      ),
    // Another process holding the write lock: the write times out with SQLITE_BUSY.
    breakRetry: async () => {
      locker = new Database(conformancePath());
      locker.exec('BEGIN EXCLUSIVE');
    },
    heal: async () => {
      locker?.exec('ROLLBACK');
      locker?.close();
      locker = undefined;
    },
  });

  let path: string;
  let sink: Sink | undefined;
  afterEach(async () => {
    await sink?.close();
    sink = undefined;
  });
  async function openFresh(): Promise<Sink> {
    path = join(root, `mirror-${nextEventId()}.db`);
    const opened = await openSqliteSink(config(path), testContext('sqlite', root));
    sink = opened;
    return opened;
  }
  const row = (url: string): Row | undefined =>
    withReader(
      path,
      (db) => db.prepare('SELECT * FROM subjects WHERE subject_url = ?').get(url) as Row | undefined,
    );

  /** Changes of one subject with chosen event ids. */
  function about(subjectId: number, eventId: number, fields: Partial<Change> = {}): Change {
    return makeChange({ subjectId, event_id: eventId, ...fields });
  }

  it('orders a workflow subject by the feed (timestamp, then id): a later *_deleted with a lower id applies', async () => {
    const sink = await openFresh();
    const wf = { service: 'workflow' as const, source: 'workflow' };
    const updated = about(2, 50, { ...wf, occurred_at: '2026-11-20T10:00:00.000Z' });
    const deleted = about(2, 40, {
      ...wf,
      event_type: 'job_deleted',
      subject_state: 'deleted',
      subject: null,
      occurred_at: '2026-11-20T10:00:05.000Z',
    });
    await sink.deliver(updated);
    await sink.deliver(deleted);
    expect(row(updated.subject_url!)).toMatchObject({ deleted: 1, last_event_id: 40 });
    // The copy of the older one, delivered late, changes nothing.
    await sink.deliver(updated);
    expect(row(updated.subject_url!)).toMatchObject({ deleted: 1, last_event_id: 40 });
  });

  it('refuses, in the same transaction, a write under a lower fencing token than one already applied', async () => {
    const sink = await openFresh();
    const fence = (token: number) => ({ fence: { scope: 'store:/x', token, valid: () => true } });
    await sink.deliver(about(3, 10), fence(2));
    await expect(sink.deliver(about(3, 11), fence(1))).rejects.toThrow(
      /store:\/x token 1: token 2 already wrote/,
    );
    expect(row(about(3, 10).subject_url!)).toMatchObject({ last_event_id: 10 });
    await expect(sink.deliverBatch!([about(3, 12)], fence(1))).rejects.toThrow(/lost its lease/);
    await sink.deliver(about(3, 13), fence(3));
    expect(row(about(3, 13).subject_url!)).toMatchObject({ last_event_id: 13 });
  });

  it('stores the subject as JSON with its version, queryable from another connection', async () => {
    const sink = await openFresh();
    const change = about(1, 10);
    await sink.deliver(change);
    expect(row(change.subject_url!)).toEqual({
      subject_url: `${BASE}/api/titles/1`,
      resource_type: 'title',
      service: 'scheduling',
      source: 'scheduling',
      subject: JSON.stringify(change.subject),
      last_event_id: 10,
      last_key: 'scheduling:10',
      updated_at: change.occurred_at,
      deleted: 0,
    });
    const name = withReader(path, (db) =>
      db
        .prepare("SELECT json_extract(subject, '$.name') FROM live_subjects WHERE resource_type = 'title'")
        .pluck()
        .get(),
    );
    expect(name).toBe(change.subject!.name);
    expect(withReader(path, (db) => db.pragma('journal_mode', { simple: true }))).toBe('wal');
    expect(withReader(path, (db) => db.pragma('user_version', { simple: true }))).toBe(MIRROR_VERSION);
  });

  it('never lets an older event overwrite a newer one', async () => {
    const sink = await openFresh();
    const newer = about(2, 20);
    const older = about(2, 15, { subject: { resource_type: 'title', id: 2, name: 'stale' } });
    await sink.deliver(newer);
    await sink.deliver(older);
    expect(row(newer.subject_url!)).toMatchObject({
      last_event_id: 20,
      subject: JSON.stringify(newer.subject),
    });
  });

  it('applies a change at most once: the same event again is a no-op', async () => {
    const sink = await openFresh();
    const change = about(3, 30);
    await sink.deliver(change);
    await sink.deliver({ ...change, subject: { resource_type: 'title', id: 3, name: 'tampered' } });
    expect(row(change.subject_url!)!.subject).toBe(JSON.stringify(change.subject));
  });

  it('tombstones a deleted subject so an older late change cannot resurrect it', async () => {
    const sink = await openFresh();
    await sink.deliver(about(4, 40));
    const deleted = about(4, 42, {
      event_type: 'title_deleted',
      operation: 'deleted',
      subject_state: 'deleted',
    });
    await sink.deliver(deleted);
    await sink.deliver(about(4, 41));
    expect(row(deleted.subject_url!)).toMatchObject({
      deleted: 1,
      subject: null,
      last_event_id: 42,
      last_key: deleted.key,
    });
    const live = withReader(path, (db) => db.prepare('SELECT count(*) FROM live_subjects').pluck().get());
    expect(live).toBe(0);
    // A newer change (the subject re-created upstream) brings it back.
    const recreated = about(4, 43, { event_type: 'title_created', operation: 'created' });
    await sink.deliver(recreated);
    expect(row(recreated.subject_url!)).toMatchObject({
      deleted: 0,
      subject: JSON.stringify(recreated.subject),
    });
  });

  it('leaves the row as it was for a gone subject', async () => {
    const sink = await openFresh();
    const present = about(5, 50);
    await sink.deliver(present);
    const before = row(present.subject_url!);
    await sink.deliver(about(5, 51, { subject_state: 'gone' }));
    expect(row(present.subject_url!)).toEqual(before);
    await sink.deliver(about(6, 52, { subject_state: 'gone' }));
    expect(row(`${BASE}/api/titles/6`)).toBeUndefined();
  });

  it('records only the version for a skipped subject', async () => {
    const sink = await openFresh();
    const present = about(7, 70);
    await sink.deliver(present);
    const skipped = about(7, 71, { subject_state: 'skipped' });
    await sink.deliver(skipped);
    expect(row(present.subject_url!)).toMatchObject({
      subject: JSON.stringify(present.subject),
      last_event_id: 71,
      last_key: skipped.key,
      deleted: 0,
    });
    await sink.deliver(about(8, 80, { subject_state: 'skipped' }));
    expect(row(`${BASE}/api/titles/8`)).toMatchObject({ subject: null, last_event_id: 80, deleted: 0 });
  });

  it('keeps the last known subject on an unreadable change, recording only its version', async () => {
    const sink = await openFresh();
    const present = about(17, 170);
    await sink.deliver(present);
    const unreadable = about(17, 171, {
      subject_state: 'unreadable',
      subject: null,
      subject_error: 'too_deep: JSON nesting is deeper than 64 levels of objects and arrays',
    });
    await sink.deliver(unreadable);
    expect(row(present.subject_url!)).toMatchObject({
      subject: JSON.stringify(present.subject),
      last_event_id: 171,
      last_key: unreadable.key,
      deleted: 0,
    });
  });

  it('ignores changes without a subject URL', async () => {
    const sink = await openFresh();
    await sink.deliver(makeChange({ subject_url: null, subject_state: 'skipped' }));
    expect(withReader(path, (db) => db.prepare('SELECT count(*) FROM subjects').pluck().get())).toBe(0);
  });

  it('refuses a database written by a newer feedsync, naming what to do', async () => {
    const sink = await openFresh();
    await sink.close();
    const db = new Database(path);
    db.pragma(`user_version = ${MIRROR_VERSION + 1}`);
    db.close();
    await expect(openSqliteSink(config(path), testContext('sqlite', root))).rejects.toThrow(
      `schema version ${MIRROR_VERSION + 1} is newer than this feedsync knows (${MIRROR_VERSION}): upgrade feedsync, or give this sink another path`,
    );
  });

  it('reopens an existing database without migrating it again', async () => {
    const sink = await openFresh();
    const change = about(9, 90);
    await sink.deliver(change);
    await sink.close();
    const reopened = await openSqliteSink(config(path), testContext('sqlite', root));
    try {
      await reopened.deliver(about(9, 89));
    } finally {
      await reopened.close();
    }
    expect(row(change.subject_url!)).toMatchObject({ last_event_id: 90 });
  });
});

describe('sqlite mirror opened while another process holds the file', () => {
  it('waits for the other process (busy timeout) instead of failing with "database is locked"', async () => {
    const { spawn } = await import('node:child_process');
    const dir = await mkdtemp(join(tmpdir(), 'feedsync-mirror-busy-'));
    const path = join(dir, 'mirror.db');
    // Another process (a second `work` opening the same mirror) holds an exclusive lock for a while.
    const holder = spawn(
      process.execPath,
      [
        '-e',
        `const D = require('better-sqlite3'); const db = new D(${JSON.stringify(path)});
         db.pragma('journal_mode = WAL'); db.exec('CREATE TABLE IF NOT EXISTS x (a)'); db.exec('BEGIN EXCLUSIVE'); db.exec('INSERT INTO x VALUES (1)');
         process.stdout.write('locked\\n'); setTimeout(() => { db.exec('COMMIT'); db.close(); }, 700);`,
      ],
      { cwd: process.cwd(), stdio: ['ignore', 'pipe', 'inherit'] },
    );
    await new Promise<void>((resolve) => holder.stdout.once('data', () => resolve()));
    const started = Date.now();
    const sink = await openSqliteSink(
      {
        name: 'mirror',
        type: 'sqlite',
        path,
        filter: { sources: [], services: [], event_types: [], resource_types: [] },
      },
      testContext('mirror', dir),
    );
    expect(Date.now() - started).toBeGreaterThan(300);
    await sink.deliver(makeChange());
    await sink.close();
    await new Promise((r) => holder.once('exit', r));
    await rm(dir, { recursive: true, force: true });
  });
});
