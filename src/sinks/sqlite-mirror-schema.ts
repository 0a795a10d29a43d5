// Numbered migrations of the mirror database, tracked in PRAGMA user_version. Append only: a
// released migration is never edited, a change of schema is a new entry.
import type Database from 'better-sqlite3';
import {
  perSourceReport,
  type Migration,
  type MigrationReport,
  type MigrationResult,
} from './mirror-migration.js';

/** The source a row's last_key (`<source>:<event_id>`) names, when it has that form; else NULL. */
const KEY_SOURCE = `CASE WHEN instr(last_key, ':') > 1
    AND last_key = substr(last_key, 1, instr(last_key, ':') - 1) || ':' || last_event_id
  THEN substr(last_key, 1, instr(last_key, ':') - 1) END`;

const MIGRATIONS: readonly (string | Migration)[] = [
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
  // 3: one row per (source, subject_url): a source's changes never touch another source's rows
  // (deletes, positions). SQLite cannot change a primary key in place: the table is rebuilt, the
  // columns in the same order. The key leads with subject_url, so lookups by it keep an index.
  // Existing rows go to the source of their last change (perSourceReport).
  {
    sql: `CREATE TABLE subjects_by_source (
       subject_url   TEXT NOT NULL,
       resource_type TEXT NOT NULL,
       service       TEXT NOT NULL,
       source        TEXT NOT NULL,
       subject       TEXT,
       last_event_id INTEGER NOT NULL,
       last_key      TEXT NOT NULL,
       updated_at    TEXT NOT NULL,
       deleted       INTEGER NOT NULL DEFAULT 0 CHECK (deleted IN (0, 1)),
       PRIMARY KEY (subject_url, source)
     );
     INSERT INTO subjects_by_source
       SELECT subject_url, resource_type, service, coalesce(${KEY_SOURCE}, source), subject,
              last_event_id, last_key, updated_at, deleted
       FROM subjects;
     DROP VIEW live_subjects;
     DROP TABLE subjects;
     ALTER TABLE subjects_by_source RENAME TO subjects;
     CREATE INDEX subjects_resource_type ON subjects (resource_type, deleted);
     CREATE VIEW live_subjects AS SELECT * FROM subjects WHERE deleted = 0;`,
    survey: {
      sql: `SELECT count(*) AS rows,
              coalesce(sum(key_source IS NOT NULL AND key_source <> source), 0) AS reattributed,
              coalesce(sum(key_source IS NULL), 0) AS unattributed
            FROM (SELECT source, ${KEY_SOURCE} AS key_source FROM subjects)`,
      report: perSourceReport,
    },
  },
];

/** The schema version this feedsync writes. */
export const MIRROR_VERSION = MIGRATIONS.length;

/**
 * How long opening a mirror waits for another process's migration: rebuilding a large mirror
 * takes a while, and the one that waits must not fail with "database is locked" meanwhile.
 */
const MIGRATION_WAIT_MS = 10 * 60_000;

/**
 * Brings the database up to the newest schema: every missing migration in one IMMEDIATE
 * transaction, which reads the version again once it holds the write lock, so two processes
 * opening the same file at once migrate it once (the second waits, then finds nothing to do).
 */
export function migrateMirror(db: Database.Database): MigrationResult {
  const version = () => db.pragma('user_version', { simple: true }) as number;
  const migrate = db.transaction((): MigrationResult => {
    const from = version();
    if (from > MIGRATIONS.length) {
      throw new Error(
        `schema version ${from} is newer than this feedsync knows (${MIGRATIONS.length}): upgrade feedsync, or give this sink another path`,
      );
    }
    const reports: MigrationReport[] = [];
    for (let v = from + 1; v <= MIGRATIONS.length; v++) {
      const step = MIGRATIONS[v - 1]!;
      const migration = typeof step === 'string' ? { sql: step } : step;
      // A new mirror has no rows to report on.
      if (migration.survey && from > 0) {
        const counts = db.prepare(migration.survey.sql).get() as Record<string, number>;
        reports.push(migration.survey.report(v, counts));
      }
      db.exec(migration.sql);
    }
    if (from < MIGRATIONS.length) db.pragma(`user_version = ${MIGRATIONS.length}`);
    return { from, to: MIGRATIONS.length, reports };
  });
  const result = ((): MigrationResult => {
    const current = version();
    if (current === MIGRATIONS.length) return { from: current, to: current, reports: [] };
    const busy = db.pragma('busy_timeout', { simple: true }) as number;
    db.pragma(`busy_timeout = ${Math.max(busy, MIGRATION_WAIT_MS)}`);
    try {
      return migrate.immediate();
    } finally {
      db.pragma(`busy_timeout = ${busy}`);
    }
  })();
  // This connection read the schema when it opened the file; another process may have migrated it
  // since. Reading the schema table checks the schema cookie and reloads it, so the statements
  // prepared next are compiled against the tables as they are (else: an ON CONFLICT target that
  // "does not match any PRIMARY KEY").
  db.prepare('SELECT count(*) FROM sqlite_master').pluck().get();
  return result;
}
