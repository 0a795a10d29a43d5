// Numbered migrations of the PostgreSQL mirror, tracked in `<schema>.schema_migrations` (one row
// per applied version). Append only: a released migration is never edited, a change of schema is
// a new entry. They run at start-up in one transaction under a transaction-scoped advisory lock,
// so any number of feedsync processes may open the same schema at once.
import type { PoolClient } from 'pg';
import { FeedsyncError } from '../core/errors.js';
import {
  perSourceReport,
  type Migration,
  type MigrationReport,
  type MigrationResult,
} from './mirror-migration.js';

/** `"name"`: an identifier quoted for SQL (the schema name is validated too, this is belt and braces). */
export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** The source a row's last_key (`<source>:<event_id>`) names, when it has that form; else NULL. */
const KEY_SOURCE = `CASE WHEN split_part(last_key, ':', 1) <> ''
    AND last_key = split_part(last_key, ':', 1) || ':' || last_event_id
  THEN split_part(last_key, ':', 1) END`;

/** Each entry: given the quoted schema name, the migration (its SQL alone, or with a survey). */
const MIGRATIONS: readonly ((s: string) => string | Migration)[] = [
  // 1: one row per subject, tombstoned (deleted, subject NULL) rather than removed, so a late older
  // change cannot resurrect it; its position in the source's feed (last_event_id, and for the
  // workflow feed last_occurred_at) guards every write. The highest fencing token applied per lease
  // scope. The append-only log of changes (written only with `changes: true`).
  (s) => `
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
    CREATE INDEX changes_subject_url ON ${s}.changes (subject_url);`,
  // 2: one row per (source, subject_url): a source's changes never touch another source's rows
  // (deletes, positions). Existing rows go to the source of their last change (perSourceReport);
  // the key leads with subject_url, so lookups by it keep an index.
  (s) => ({
    sql: `
      UPDATE ${s}.subjects SET source = ${KEY_SOURCE}
        WHERE ${KEY_SOURCE} IS DISTINCT FROM source AND ${KEY_SOURCE} IS NOT NULL;
      ALTER TABLE ${s}.subjects DROP CONSTRAINT subjects_pkey, ADD PRIMARY KEY (subject_url, source);`,
    survey: {
      sql: `
        SELECT count(*)::int AS rows,
               count(*) FILTER (WHERE key_source <> source)::int AS reattributed,
               count(*) FILTER (WHERE key_source IS NULL)::int AS unattributed
        FROM (SELECT source, ${KEY_SOURCE} AS key_source FROM ${s}.subjects) r`,
      report: perSourceReport,
    },
  }),
];

/** The schema version this feedsync writes. */
export const SCHEMA_VERSION = MIGRATIONS.length;

/** What the sink reads and writes, checked after migrating: a table someone else altered is named. */
const EXPECTED: Record<string, { columns: string[]; key: string[] }> = {
  subjects: {
    columns: [
      'subject_url',
      'resource_type',
      'service',
      'source',
      'subject',
      'last_event_id',
      'last_occurred_at',
      'last_key',
      'updated_at',
      'deleted',
    ],
    key: ['subject_url', 'source'],
  },
  fences: { columns: ['scope', 'token'], key: ['scope'] },
  changes: {
    columns: [
      'key',
      'source',
      'service',
      'event_id',
      'event_type',
      'resource_type',
      'operation',
      'occurred_at',
      'subject_url',
      'subject_state',
      'change',
    ],
    key: ['key'],
  },
};

/** The schema holds a version this feedsync does not know: a newer feedsync wrote it. */
export class NewerSchemaError extends FeedsyncError {
  override name = 'NewerSchemaError';
}

/** The schema's tables are not what the migrations made (created or altered by someone else). */
export class BadSchemaError extends FeedsyncError {
  override name = 'BadSchemaError';
}

/**
 * Brings `schema` up to SCHEMA_VERSION: creates the schema when it does not exist (needs CREATE on
 * the database; a schema created beforehand needs only CREATE on it, and a schema already at this
 * version needs only USAGE and SELECT on schema_migrations), applies the missing migrations, then
 * checks the tables' columns and keys. One transaction, under pg_advisory_xact_lock keyed by the
 * schema name: two processes starting together migrate one after the other.
 */
export async function migrate(
  client: PoolClient,
  schema: string,
  feedsyncVersion: string,
): Promise<MigrationResult> {
  const s = quoteIdent(schema);
  await client.query('BEGIN');
  try {
    await client.query("SELECT pg_advisory_xact_lock(hashtext('feedsync.migrate'), hashtext($1))", [schema]);
    const exists = await client.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
    // CREATE SCHEMA IF NOT EXISTS would check CREATE on the database even when the schema exists.
    if (exists.rowCount === 0) await client.query(`CREATE SCHEMA ${s}`);
    const tracked = await client.query('SELECT to_regclass($1) AS t', [`${s}.schema_migrations`]);
    if ((tracked.rows[0] as { t: string | null }).t === null) {
      const foreign = await client.query('SELECT to_regclass($1) AS t', [`${s}.subjects`]);
      if ((foreign.rows[0] as { t: string | null }).t !== null)
        throw new BadSchemaError(
          `schema "${schema}" holds a table subjects that feedsync did not create (no ${schema}.schema_migrations): ` +
            'choose another `schema` for this sink, or drop or rename that table',
          false,
        );
      await client.query(
        `CREATE TABLE ${s}.schema_migrations (
           version    integer PRIMARY KEY,
           applied_at timestamptz NOT NULL DEFAULT now(),
           feedsync   text NOT NULL
         )`,
      );
    }
    const found = await client.query(
      `SELECT coalesce(max(version), 0)::int AS v FROM ${s}.schema_migrations`,
    );
    const from = (found.rows[0] as { v: number }).v;
    if (from > SCHEMA_VERSION)
      throw new NewerSchemaError(
        `schema "${schema}" is at version ${from}, written by a newer feedsync; this feedsync ${feedsyncVersion} ` +
          `knows versions up to ${SCHEMA_VERSION}: upgrade feedsync, or give this sink another \`schema\``,
        false,
      );
    const reports: MigrationReport[] = [];
    for (let v = from + 1; v <= SCHEMA_VERSION; v++) {
      const step = MIGRATIONS[v - 1]!(s);
      const migration = typeof step === 'string' ? { sql: step } : step;
      // A new schema has no rows to report on.
      if (migration.survey && from > 0) {
        const found = await client.query(migration.survey.sql);
        reports.push(migration.survey.report(v, found.rows[0] as Record<string, number>));
      }
      await client.query(migration.sql);
      await client.query(`INSERT INTO ${s}.schema_migrations (version, feedsync) VALUES ($1, $2)`, [
        v,
        feedsyncVersion,
      ]);
    }
    await checkShape(client, schema);
    await client.query('COMMIT');
    return { from, to: SCHEMA_VERSION, reports };
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}

/** Every table the sink uses has its columns and a unique key on its key columns (ON CONFLICT needs it). */
async function checkShape(client: PoolClient, schema: string): Promise<void> {
  const s = quoteIdent(schema);
  const problems: string[] = [];
  for (const [table, want] of Object.entries(EXPECTED)) {
    const relation = `${s}.${quoteIdent(table)}`;
    const cols = await client.query(
      `SELECT attname AS name FROM pg_attribute
       WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`,
      [relation],
    );
    const have = new Set((cols.rows as { name: string }[]).map((r) => r.name));
    if (have.size === 0) {
      problems.push(`table ${schema}.${table} is missing`);
      continue;
    }
    const missing = want.columns.filter((c) => !have.has(c));
    if (missing.length > 0) {
      problems.push(`${schema}.${table} lacks column(s) ${missing.join(', ')}`);
      continue;
    }
    // The unique indexes' column sets (in name order: ON CONFLICT matches a set, not an order).
    const keys = await client.query(
      `SELECT array(SELECT a.attname::text FROM pg_attribute a
                    WHERE a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) ORDER BY a.attname) AS columns
       FROM pg_index i WHERE i.indrelid = to_regclass($1) AND i.indisunique
         AND i.indpred IS NULL AND i.indexprs IS NULL`,
      [relation],
    );
    const key = [...want.key].sort().join(',');
    if (!(keys.rows as { columns: string[] }[]).some((r) => r.columns.join(',') === key))
      problems.push(`${schema}.${table}'s primary key is not (${want.key.join(', ')})`);
  }
  if (problems.length > 0)
    throw new BadSchemaError(
      `schema "${schema}" is not what feedsync's migrations made (${problems.join('; ')}): it was changed ` +
        'outside feedsync. Restore it (or drop the schema and let feedsync recreate it, then replay), ' +
        'or give this sink another `schema`',
      false,
    );
}
