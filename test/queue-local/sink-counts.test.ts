// The local queue's counts per sink (migration 7, src/queue/local/backlog.ts) are kept by triggers
// in the statements that change the rows, so they equal a count of the rows whatever writes them:
// checked against COUNT(*) after every kind of write the queue and the ops commands make, and on a
// store written before the counts existed (the migration counts what it finds).
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Backlog } from '../../src/queue/local/backlog.js';
import { migrations } from '../../src/store/migrations.js';
import { openStore, type Db } from '../../src/store/store.js';
import { tempDir } from '../support/harness.js';

function counted(db: Db): Record<string, { queued: number; dead: number }> {
  const out: Record<string, { queued: number; dead: number }> = {};
  const sinks = db
    .prepare(
      'SELECT sink FROM deliveries UNION SELECT sink FROM page_log UNION SELECT sink FROM dead_letters',
    )
    .pluck()
    .all() as string[];
  for (const sink of sinks)
    out[sink] = {
      queued:
        (db.prepare('SELECT COUNT(*) FROM deliveries WHERE sink = ?').pluck().get(sink) as number) +
        (db.prepare('SELECT IFNULL(SUM(n), 0) FROM page_log WHERE sink = ?').pluck().get(sink) as number),
      dead: db.prepare('SELECT COUNT(*) FROM dead_letters WHERE sink = ?').pluck().get(sink) as number,
    };
  return out;
}

function kept(db: Db): Record<string, { queued: number; dead: number }> {
  return Object.fromEntries([...new Backlog(db).counts()].filter(([, c]) => c.queued !== 0 || c.dead !== 0));
}

const insert = (db: Db, sink: string, key: string, id?: number) =>
  db
    .prepare(
      'INSERT INTO deliveries (id, sink, key, subject_key, body) VALUES (?, ?, ?, ?, ?) ON CONFLICT (sink, key) DO NOTHING',
    )
    .run(id ?? null, sink, key, key, '{}');

describe('queue counts kept by the store', () => {
  it('equal a count of the rows after every kind of write', () => {
    const db = openStore(join(tempDir(), 'store.db'));
    try {
      const check = (step: string) => expect(kept(db), step).toEqual(counted(db));
      for (let i = 0; i < 10; i++) insert(db, 'a', `a${i}`);
      insert(db, 'a', 'a3'); // already queued: ignored, not counted
      db.prepare(
        `INSERT OR IGNORE INTO deliveries (sink, key, subject_key, body) VALUES ('b', 'b1', 'x', '{}')`,
      ).run();
      check('rows inserted');
      db.prepare('INSERT INTO page_log (id, sink, n, rows) VALUES (100, ?, 7, ?)').run('b', '[]');
      db.prepare('INSERT INTO page_log (id, sink, n, rows) VALUES (200, ?, 3, ?)').run('a', '[]');
      check('pages logged');
      // A logged page moved to rows (2 of its 7 undelivered), as after a failure.
      db.transaction(() => {
        insert(db, 'b', 'p1', 100);
        insert(db, 'b', 'p2', 101);
        db.prepare('DELETE FROM page_log WHERE id = 100').run();
      })();
      check('a page moved to rows');
      db.prepare('DELETE FROM deliveries WHERE id BETWEEN 1 AND 4').run();
      db.prepare(`DELETE FROM deliveries WHERE id IN (SELECT value FROM json_each('[6, 7]'))`).run();
      check('rows acknowledged');
      const bury = db.prepare(
        `INSERT INTO dead_letters (sink, key, body, attempts, error, failed_at) VALUES (?, ?, '{}', 1, 'e', 0)
         ON CONFLICT (sink, key) DO UPDATE SET attempts = excluded.attempts`,
      );
      bury.run('a', 'd1');
      bury.run('a', 'd1'); // buried again: still one
      bury.run('b', 'd2');
      check('dead letters');
      // dlq retry: dead letter back to a row.
      db.transaction(() => {
        insert(db, 'a', 'd1');
        db.prepare(`DELETE FROM dead_letters WHERE sink = 'a' AND key = 'd1'`).run();
      })();
      db.prepare('DELETE FROM page_log').run();
      db.prepare(`DELETE FROM dead_letters WHERE sink = 'b'`).run();
      check('retried, dropped, every page gone');
      expect(kept(db).a!.queued).toBe(5);
    } finally {
      db.close();
    }
  });

  it('counts what a store written before them holds', () => {
    const path = join(tempDir(), 'store.db');
    const raw = new Database(path);
    for (const m of migrations.filter((x) => x.version <= 6)) raw.exec(m.sql);
    raw.pragma('user_version = 6');
    for (let i = 0; i < 25; i++) insert(raw, 's', `k${i}`);
    raw.prepare(`INSERT INTO page_log (id, sink, n, rows) VALUES (500, 's', 4, '[]')`).run();
    raw
      .prepare(
        `INSERT INTO dead_letters (sink, key, body, attempts, error, failed_at) VALUES ('t', 'x', '{}', 1, 'e', 0)`,
      )
      .run();
    raw.close();
    const db = openStore(path);
    try {
      expect(kept(db)).toEqual({ s: { queued: 29, dead: 0 }, t: { queued: 0, dead: 1 } });
      expect(kept(db)).toEqual(counted(db));
    } finally {
      db.close();
    }
  });
});
