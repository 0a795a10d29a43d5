// The sqlite mirror sink: the current state of every subject, keyed by (source, subject_url), in
// its own SQLite file. A per-row guard by position in the source's feed makes every change apply at
// most once and keeps a late (older) change from overwriting newer state; a fencing-token check in
// the same transaction refuses the writes of a process that lost its lease. Every write is scoped
// to the change's source: one source's changes (deletes, absurd positions) never reach another's rows.
import Database from 'better-sqlite3';
import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { z } from 'zod';
import { nonEmpty, sinkCommonFields } from '../config/fields.js';
import { errorMessage, FeedsyncError, RetryLaterError } from '../core/errors.js';
import type { Change } from '../core/change.js';
import type { SinkDefinition } from './definition.js';
import { logMigration } from './mirror-migration.js';
import type { DeliveryContext, Sink, SinkContext } from './sink.js';
import { migrateMirror } from './sqlite-mirror-schema.js';

/** A write under a fencing token lower than one the mirror already applied: a stale process. */
class StaleWriterError extends RetryLaterError {
  override name = 'StaleWriterError';
}

/** A `type: sqlite` entry of `sinks`. */
export const sqliteSinkSchema = z.strictObject({
  ...sinkCommonFields,
  type: z.literal('sqlite'),
  path: nonEmpty,
});
export type SqliteSinkConfig = z.output<typeof sqliteSinkSchema>;

// Every statement upserts only when the row is new or the change is newer than what it holds:
// the WHERE on the DO UPDATE branch is the version guard, so guard and write are one statement.
// The conflict target is the row of the change's own source: its guard compares positions in one
// feed only, and no change of another source can update (or tombstone) that row.
const UPSERT_HEAD = `INSERT INTO subjects
  (subject_url, resource_type, service, source, subject, last_event_id, last_key, updated_at, deleted)
  VALUES (@subject_url, @resource_type, @service, @source, @subject, @event_id, @key, @occurred_at, @deleted)
  ON CONFLICT (source, subject_url) DO UPDATE SET
    last_event_id = excluded.last_event_id, last_key = excluded.last_key, updated_at = excluded.updated_at`;
// Newer by position in the feed: the scheduling feed lists by id; the workflow feed lists by
// timestamp (its spec), so there a change is newer by (occurred_at, id) — a *_deleted event with a
// lower id than the last change applied, but listed after it, must still apply. updated_at holds
// the occurred_at of the change applied (UTC, milliseconds, Z: text order is time order). Positions
// of one source's feed only are ever compared: the row is that source's.
const NEWER = `WHERE CASE WHEN excluded.service = 'workflow'
    THEN (excluded.updated_at, excluded.last_event_id) > (subjects.updated_at, subjects.last_event_id)
    ELSE excluded.last_event_id > subjects.last_event_id END`;

const SQL = {
  // present and deleted replace the whole row; deleted keeps it as a tombstone (subject NULL).
  replace: `${UPSERT_HEAD}, resource_type = excluded.resource_type, service = excluded.service,
    subject = excluded.subject, deleted = excluded.deleted ${NEWER}`,
  // skipped and unreadable only record that this event was seen: subject and deleted flag stay as they were.
  versionOnly: `${UPSERT_HEAD} ${NEWER}`,
};

export interface SqliteSinkOptions {
  /** How long a write waits for another connection's lock before failing as retry-later. */
  busyTimeoutMs?: number;
}

export async function openSqliteSink(
  config: SqliteSinkConfig,
  ctx: SinkContext,
  options: SqliteSinkOptions = {},
): Promise<Sink> {
  const path = resolve(ctx.configDir, config.path);
  let db: Database.Database;
  try {
    mkdirSync(dirname(path), { recursive: true });
    // The busy timeout first: two processes opening one mirror at once (a `work` per replica)
    // wait for each other's migration instead of failing with "database is locked".
    db = new Database(path, { timeout: Math.max(0, Math.floor(options.busyTimeoutMs ?? 5000)) });
    // Switching to WAL takes an exclusive lock without waiting; once a file is WAL it stays WAL.
    if (db.pragma('journal_mode', { simple: true }) !== 'wal') db.pragma('journal_mode = WAL');
    // FULL: deliver() resolving means the row survives a power loss, not just a process crash.
    db.pragma('synchronous = FULL');
    logMigration(ctx.logger, 'sqlite', { path }, migrateMirror(db));
  } catch (err) {
    throw new FeedsyncError(
      `sink "${config.name}": cannot open mirror database ${path}: ${errorMessage(err)}`,
      true,
      {
        cause: err,
      },
    );
  }
  return new SqliteMirrorSink(config.name, path, db);
}

class SqliteMirrorSink implements Sink {
  private readonly replace: Database.Statement;
  private readonly versionOnly: Database.Statement;
  private readonly fenceRead: Database.Statement;
  private readonly fenceWrite: Database.Statement;
  private closed = false;

  constructor(
    private readonly name: string,
    private readonly path: string,
    private readonly db: Database.Database,
  ) {
    this.replace = db.prepare(SQL.replace);
    this.versionOnly = db.prepare(SQL.versionOnly);
    this.fenceRead = db.prepare('SELECT token FROM fences WHERE scope = ?').pluck();
    this.fenceWrite = db.prepare(
      'INSERT INTO fences (scope, token) VALUES (?, ?) ON CONFLICT (scope) DO UPDATE SET token = excluded.token',
    );
  }

  /** Inside the write's transaction: refuse a token lower than one already applied for its scope. */
  private fence(context: DeliveryContext | undefined): void {
    const fence = context?.fence;
    if (!fence) return;
    const highest = this.fenceRead.get(fence.scope) as number | undefined;
    if (highest !== undefined && fence.token < highest)
      throw new StaleWriterError(
        `sink "${this.name}": refused a write under ${fence.scope} token ${fence.token}: token ${highest} already wrote (this process lost its lease)`,
      );
    if (highest !== fence.token) this.fenceWrite.run(fence.scope, fence.token);
  }

  /** One transaction (one fsync) for the whole batch. */
  async deliverBatch(changes: Change[], context?: DeliveryContext): Promise<void> {
    if (this.closed) throw new RetryLaterError(`sink "${this.name}": closed, cannot write ${this.path}`);
    try {
      this.db.transaction(() => {
        this.fence(context);
        for (const change of changes) this.apply(change);
      })();
    } catch (err) {
      throw err instanceof RetryLaterError
        ? err
        : new RetryLaterError(
            `sink "${this.name}": cannot apply a batch to ${this.path}: ${errorMessage(err)}`,
            undefined,
            {
              cause: err,
            },
          );
    }
  }

  async deliver(change: Change, context?: DeliveryContext): Promise<void> {
    if (this.closed) throw new RetryLaterError(`sink "${this.name}": closed, cannot write ${this.path}`);
    if (!context?.fence) return this.apply(change);
    return this.deliverBatch([change], context);
  }

  private apply(change: Change): void {
    // Changes without a subject URL have no row to mirror into.
    if (change.subject_url === null) return;
    const params = {
      subject_url: change.subject_url,
      resource_type: change.resource_type,
      service: change.service,
      source: change.source,
      subject: null as string | null,
      event_id: change.event_id,
      key: change.key,
      occurred_at: change.occurred_at,
      deleted: 0,
    };
    try {
      switch (change.subject_state) {
        case 'present':
          this.replace.run({ ...params, subject: JSON.stringify(change.subject) });
          return;
        case 'deleted':
          this.replace.run({ ...params, deleted: 1 });
          return;
        case 'skipped':
        case 'unreadable':
          // No subject to write (not asked for, or it could not be decoded): the row keeps its last
          // known subject and only records that this event was seen.
          this.versionOnly.run(params);
          return;
        case 'gone':
          // 404 on fetch: its *_deleted change follows and tombstones the row; until then the
          // last known state is the best answer, so nothing is recorded.
          return;
      }
    } catch (err) {
      throw new RetryLaterError(
        `sink "${this.name}": cannot apply ${change.key} to ${this.path}: ${errorMessage(err)}`,
        undefined,
        { cause: err },
      );
    }
  }

  async healthy(): Promise<boolean> {
    return !this.closed && this.db.open;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.db.close();
  }
}

export const sqliteSink = {
  type: 'sqlite',
  schema: sqliteSinkSchema,
  open: (config, ctx) => openSqliteSink(config, ctx),
} satisfies SinkDefinition<SqliteSinkConfig>;
