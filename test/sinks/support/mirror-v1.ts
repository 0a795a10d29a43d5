// Mirrors as the feedsync before per-source rows left them (sqlite schema 2, postgres schema 1:
// rows keyed by subject_url alone), to open with the current sinks. The DDL is that release's
// migrations, verbatim (git show a535699:src/sinks/sqlite-mirror-schema.ts, postgres-schema.ts);
// the rows are written the way its sinks wrote them.
import Database from 'better-sqlite3';

/** One row of the old `subjects` table. */
export interface OldRow {
  subject_url: string;
  resource_type: string;
  service: 'scheduling' | 'workflow';
  source: string;
  subject: Record<string, unknown> | null;
  last_event_id: number;
  last_key: string;
  occurred_at: string;
  deleted: boolean;
}

const SQLITE_V2 = `
  CREATE TABLE subjects (
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
   CREATE VIEW live_subjects AS SELECT * FROM subjects WHERE deleted = 0;
  CREATE TABLE fences (scope TEXT PRIMARY KEY, token INTEGER NOT NULL);`;

/** A sqlite mirror at schema 2 (WAL, as the sink left it) holding `rows` and a fence. */
export function createSqliteV2(path: string, rows: OldRow[]): void {
  const db = new Database(path);
  try {
    db.pragma('journal_mode = WAL');
    db.exec(SQLITE_V2);
    db.pragma('user_version = 2');
    const insert = db.prepare(
      `INSERT INTO subjects (subject_url, resource_type, service, source, subject, last_event_id, last_key, updated_at, deleted)
       VALUES (@subject_url, @resource_type, @service, @source, @subject, @last_event_id, @last_key, @occurred_at, @deleted)`,
    );
    db.transaction(() => {
      for (const r of rows)
        insert.run({
          ...r,
          subject: r.subject === null ? null : JSON.stringify(r.subject),
          deleted: r.deleted ? 1 : 0,
        });
    })();
    db.prepare('INSERT INTO fences (scope, token) VALUES (?, ?)').run('store:/old', 7);
  } finally {
    db.close();
  }
}

/** The SQL creating a postgres mirror at schema 1 in schema `s` (a plain identifier). */
export function postgresV1(s: string): string {
  return `
    CREATE SCHEMA ${s};
    CREATE TABLE ${s}.schema_migrations (
      version    integer PRIMARY KEY,
      applied_at timestamptz NOT NULL DEFAULT now(),
      feedsync   text NOT NULL
    );
    INSERT INTO ${s}.schema_migrations (version, feedsync) VALUES (1, '0.9.0');
    CREATE TABLE ${s}.subjects (
      subject_url      text PRIMARY KEY,
      resource_type    text NOT NULL,
      service          text NOT NULL,
      source           text NOT NULL,
      subject          jsonb,
      last_event_id    bigint NOT NULL,
      last_occurred_at timestamptz NOT NULL,
      last_key         text NOT NULL,
      updated_at       timestamptz NOT NULL DEFAULT now(),
      deleted          boolean NOT NULL DEFAULT false
    );
    CREATE INDEX subjects_resource_type ON ${s}.subjects (resource_type) WHERE NOT deleted;
    CREATE VIEW ${s}.live_subjects AS
      SELECT subject_url, resource_type, service, source, subject, last_event_id, last_occurred_at,
             last_key, updated_at
      FROM ${s}.subjects WHERE NOT deleted;
    CREATE TABLE ${s}.fences (scope text PRIMARY KEY, token bigint NOT NULL);
    CREATE TABLE ${s}.changes (
      key           text PRIMARY KEY,
      source        text NOT NULL,
      service       text NOT NULL,
      event_id      bigint NOT NULL,
      event_type    text NOT NULL,
      resource_type text NOT NULL,
      operation     text NOT NULL,
      occurred_at   timestamptz NOT NULL,
      subject_url   text,
      subject_state text NOT NULL,
      change        jsonb NOT NULL,
      received_at   timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX changes_subject_url ON ${s}.changes (subject_url);
    INSERT INTO ${s}.fences (scope, token) VALUES ('store:/old', 7);`;
}

/** The INSERT of `rows` into the old postgres table, as one statement with its parameters. */
export function postgresV1Rows(s: string, rows: OldRow[]): { text: string; values: unknown[] } {
  return {
    text: `INSERT INTO ${s}.subjects (subject_url, resource_type, service, source, subject, last_event_id,
                                     last_occurred_at, last_key, deleted)
           SELECT r->>'subject_url', r->>'resource_type', r->>'service', r->>'source',
                  CASE WHEN r->'subject' = 'null'::jsonb THEN NULL ELSE r->'subject' END,
                  (r->>'last_event_id')::bigint, (r->>'occurred_at')::timestamptz, r->>'last_key',
                  (r->>'deleted')::boolean
           FROM jsonb_array_elements($1::jsonb) AS r`,
    values: [JSON.stringify(rows)],
  };
}

/**
 * Rows of every kind an old mirror holds, under `base`: two sources' live rows, a workflow row, a
 * tombstone, a row whose last change (a skipped one, whose position the old sqlite mirror recorded
 * without its source) came from another source than its subject, and one whose last_key names no
 * source. Attribution: 5 rows, 1 reattributed, 1 unattributed.
 */
export function oldRows(base: string): OldRow[] {
  const at = (s: number) => new Date(Date.UTC(2026, 10, 20, 10, 0, s)).toISOString();
  const title = (id: number, name: string) => ({ resource_type: 'title', id, name });
  return [
    row(`${base}/api/titles/1`, 'sched', 10, at(1), title(1, 'one')),
    row(`${base}/api/work_areas/1/jobs/2`, 'wf', 20, at(2), { resource_type: 'job', id: 2 }, 'workflow'),
    { ...row(`${base}/api/titles/3`, 'sched', 30, at(3), null), deleted: true },
    { ...row(`${base}/api/titles/4`, 'alpha', 40, at(4), title(4, 'four')), last_key: 'beta:40' },
    { ...row(`${base}/api/titles/5`, 'sched', 50, at(5), title(5, 'five')), last_key: 'imported-by-hand' },
  ];
}

function row(
  subject_url: string,
  source: string,
  id: number,
  occurred_at: string,
  subject: Record<string, unknown> | null,
  service: 'scheduling' | 'workflow' = 'scheduling',
): OldRow {
  return {
    subject_url,
    resource_type: service === 'workflow' ? 'job' : 'title',
    service,
    source,
    subject,
    last_event_id: id,
    last_key: `${source}:${id}`,
    occurred_at,
    deleted: false,
  };
}
