// Numbered migrations of the mirror database, tracked in PRAGMA user_version. Append only: a
// released migration is never edited, a change of schema is a new entry.
import type Database from 'better-sqlite3';

const MIGRATIONS: readonly string[] = [
  // 1: one row per subject, tombstoned (deleted = 1, subject NULL) rather than removed, so a late
  // older change cannot resurrect it.
  `CREATE TABLE subjects (
     subject_url   TEXT PRIMARY KEY,
     resource_type TEXT NOT NULL,
     service       TEXT NOT NULL,
     source        TEXT NOT NULL,
     subject       TEXT,
     last_event_id INTEGER NOT NULL,
     last_key      TEXT NOT NULL,
     updated_at    TEXT NOT NULL,
     deleted       INTEGER NOT NULL DEFAULT 0 CHECK (deleted IN (0, 1))
   );
   CREATE INDEX subjects_resource_type ON subjects (resource_type, deleted);
   CREATE VIEW live_subjects AS SELECT * FROM subjects WHERE deleted = 0;`,
  // 2: the highest fencing token applied per lease scope (DeliveryFence): a change delivered under
  // a lower token comes from a process that lost its lease, and is refused.
  `CREATE TABLE fences (scope TEXT PRIMARY KEY, token INTEGER NOT NULL);`,
];

/**
 * Brings the database up to the newest schema. Each step reads the version and applies itself in
 * one IMMEDIATE transaction, so two processes opening the same file at once cannot both run it.
 */
export function migrateMirror(db: Database.Database): void {
  const step = db.transaction((): boolean => {
    const current = db.pragma('user_version', { simple: true }) as number;
    if (current > MIGRATIONS.length) {
      throw new Error(`schema version ${current} is newer than this feedsync knows (${MIGRATIONS.length})`);
    }
    if (current === MIGRATIONS.length) return false;
    db.exec(MIGRATIONS[current]!);
    db.pragma(`user_version = ${current + 1}`);
    return true;
  });
  while (step.immediate()) {
    // One migration per transaction until none is left.
  }
}
