#!/usr/bin/env node
// `node scripts/mirror-migration-timing.mjs [ROWS]` (after `npm run build`): how long opening a
// sqlite mirror of ROWS rows (default 500000) written before rows were keyed by (source,
// subject_url) takes, migration included, and what it does to the file's size. Each row holds a
// subject of about 450 bytes of JSON. Prints one JSON line; the files go in the OS temp directory
// and are removed.
import Database from 'better-sqlite3';
import { rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import pino from 'pino';
import { openSqliteSink } from '../dist/sinks/sqlite-mirror.js';

const rows = Number(process.argv[2] ?? 500_000);
const path = join(tmpdir(), `feedsync-migration-timing-${process.pid}.db`);
const files = [path, `${path}-wal`, `${path}-shm`];
const size = () => files.reduce((sum, f) => sum + (statSync(f, { throwIfNoEntry: false })?.size ?? 0), 0);
try {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  // Schema 2, as the sqlite mirror created it.
  db.exec(`CREATE TABLE subjects (
     subject_url TEXT PRIMARY KEY, resource_type TEXT NOT NULL, service TEXT NOT NULL, source TEXT NOT NULL,
     subject TEXT, last_event_id INTEGER NOT NULL, last_key TEXT NOT NULL, updated_at TEXT NOT NULL,
     deleted INTEGER NOT NULL DEFAULT 0 CHECK (deleted IN (0, 1)));
   CREATE INDEX subjects_resource_type ON subjects (resource_type, deleted);
   CREATE VIEW live_subjects AS SELECT * FROM subjects WHERE deleted = 0;
   CREATE TABLE fences (scope TEXT PRIMARY KEY, token INTEGER NOT NULL);`);
  db.pragma('user_version = 2');
  const insert = db.prepare('INSERT INTO subjects VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)');
  const at = new Date().toISOString();
  db.transaction(() => {
    for (let i = 1; i <= rows; i++) {
      const url = `https://scheduling.example/api/titles/${i}`;
      const subject = {
        resource_type: 'title',
        id: i,
        name: `Title ${i}`,
        self_link: url,
        notes: 'x'.repeat(300),
      };
      insert.run(url, 'title', 'scheduling', 'scheduling', JSON.stringify(subject), i, `scheduling:${i}`, at);
    }
  })();
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.close();
  const before = size();
  const started = performance.now();
  const sink = await openSqliteSink(
    {
      name: 'mirror',
      type: 'sqlite',
      path,
      filter: { sources: [], services: [], event_types: [], resource_types: [] },
    },
    { name: 'mirror', configDir: tmpdir(), logger: pino({ level: 'silent' }) },
  );
  const ms = performance.now() - started;
  const after = size();
  await sink.close();
  const mb = (b) => Math.round(b / 1e6);
  console.log(
    JSON.stringify({
      rows,
      open_and_migrate_ms: Math.round(ms),
      mb_before: mb(before),
      mb_after_with_wal: mb(after),
      mb_after_checkpoint: mb(size()),
    }),
  );
} finally {
  for (const f of files) rmSync(f, { force: true });
}
