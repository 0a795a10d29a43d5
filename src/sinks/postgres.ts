// The PostgreSQL mirror sink: the sqlite mirror's model in a schema of a PostgreSQL database (one
// row per (source, subject_url), a tombstone per deleted subject, a live_subjects view, optionally
// the log of every change), written through a small pg pool. One transaction per batch: the
// fencing token check and ONE multi-row INSERT … ON CONFLICT … DO UPDATE whose WHERE is the guard
// by position in the source's feed, so each change applies at most once and in feed order
// whatever crashes.
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { ConnectionOptions } from 'node:tls';
import type { Pool, PoolClient, PoolConfig, QueryConfig } from 'pg';
import { z } from 'zod';
import { atLeastOne, nonEmpty, sinkCommonFields } from '../config/fields.js';
import type { Change } from '../core/change.js';
import { ConfigError, errorMessage, FeedsyncError, NeverError, RetryLaterError } from '../core/errors.js';
import type { SinkDefinition } from './definition.js';
import { logMigration } from './mirror-migration.js';
import { BadSchemaError, migrate, NewerSchemaError, quoteIdent } from './postgres-schema.js';
import type { DeliveryContext, DeliveryFence, Sink, SinkContext } from './sink.js';
import { feedsyncVersion } from './version.js';

/** A write under a fencing token lower than one the mirror already applied: a stale process. */
export class StaleWriterError extends RetryLaterError {
  override name = 'StaleWriterError';
}

/** URL parameters that configure TLS; the sink's own keys do it instead (see connectionSettings). */
const URL_TLS_FILES = ['sslcert', 'sslkey', 'sslrootcert'] as const;
const URL_TLS_MODES = new Set(['disable', 'require', 'verify-ca', 'verify-full']);

function parsePostgresUrl(value: string): URL | undefined {
  try {
    const url = new URL(value);
    return url.protocol === 'postgres:' || url.protocol === 'postgresql:' ? url : undefined;
  } catch {
    return undefined;
  }
}

// Lower case, not pg_*: what `SELECT … FROM feedsync.live_subjects` reads without quoting.
const SCHEMA_NAME = /^(?!pg_)[a-z_][a-z0-9_]{0,62}$/;

/** A `type: postgres` entry of `sinks`. */
export const postgresSinkSchema = z
  .strictObject({
    ...sinkCommonFields,
    type: z.literal('postgres'),
    // Never echo the value: it usually carries the password.
    url: z.string().refine((v) => parsePostgresUrl(v) !== undefined, {
      error: 'must be a postgres:// or postgresql:// URL (postgres://user:password@host:5432/database)',
    }),
    schema: z
      .string()
      .regex(SCHEMA_NAME, {
        error: 'must be a lower-case SQL identifier (letters, digits, _; at most 63; not pg_…)',
      })
      .default('feedsync'),
    changes: z.boolean().default(false),
    pool_size: atLeastOne.max(100).default(4),
    statement_timeout_ms: atLeastOne.default(30000),
    ca_file: nonEmpty.optional(),
    cert_file: nonEmpty.optional(),
    key_file: nonEmpty.optional(),
    reject_unauthorized: z.boolean().default(true),
  })
  .superRefine((sink, ctx) => {
    if ((sink.cert_file === undefined) !== (sink.key_file === undefined))
      ctx.addIssue({
        code: 'custom',
        path: [sink.cert_file === undefined ? 'cert_file' : 'key_file'],
        message: 'cert_file and key_file go together (a client certificate needs its key)',
      });
    const url = parsePostgresUrl(sink.url);
    if (!url) return;
    for (const param of URL_TLS_FILES)
      if (url.searchParams.has(param))
        ctx.addIssue({
          code: 'custom',
          path: ['url'],
          message: `${param} in the URL is not supported: use the sink's ca_file, cert_file and key_file`,
        });
    const mode = url.searchParams.get('sslmode');
    if (mode !== null && !URL_TLS_MODES.has(mode))
      ctx.addIssue({
        code: 'custom',
        path: ['url'],
        message: `sslmode=${mode} is not supported: use disable, require, verify-ca or verify-full`,
      });
    if (mode === 'disable' && (sink.ca_file !== undefined || sink.cert_file !== undefined))
      ctx.addIssue({
        code: 'custom',
        path: ['url'],
        message: 'sslmode=disable contradicts ca_file/cert_file',
      });
  });
export type PostgresSinkConfig = z.output<typeof postgresSinkSchema>;

/**
 * The pool's connection settings from the sink's config: the URL without its TLS parameters (pg
 * would otherwise let them override `ssl`), and `ssl` built from sslmode and the sink's TLS keys.
 * TLS is on with `sslmode=require|verify-ca|verify-full` or when ca_file/cert_file is given, and
 * the server's certificate is then verified (chain and host name; verify-ca: chain only) unless
 * `reject_unauthorized: false`. ca_file replaces the default trust store, as for sources.
 */
export function connectionSettings(
  config: PostgresSinkConfig,
  configDir: string,
): { connectionString: string; ssl: false | ConnectionOptions; target: string } {
  const url = parsePostgresUrl(config.url);
  if (!url) throw new ConfigError(`sinks.${config.name}.url`, 'not a postgres:// URL');
  const mode = url.searchParams.get('sslmode');
  const cleaned = new URL(url.href);
  let stripped = false;
  for (const param of ['ssl', 'sslmode', 'uselibpqcompat'])
    if (cleaned.searchParams.has(param)) {
      cleaned.searchParams.delete(param);
      stripped = true;
    }
  const on =
    mode === 'require' ||
    mode === 'verify-ca' ||
    mode === 'verify-full' ||
    ['true', '1'].includes(url.searchParams.get('ssl') ?? '') ||
    config.ca_file !== undefined ||
    config.cert_file !== undefined;
  let ssl: false | ConnectionOptions = false;
  if (on) {
    const read = (key: 'ca_file' | 'cert_file' | 'key_file'): string | undefined => {
      const file = config[key];
      if (file === undefined) return undefined;
      const path = resolve(configDir, file);
      try {
        return readFileSync(path, 'latin1');
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code ?? 'error';
        throw new ConfigError(`sinks.${config.name}.${key}`, `cannot read ${path} (${code})`);
      }
    };
    ssl = { rejectUnauthorized: config.reject_unauthorized };
    const ca = read('ca_file');
    if (ca !== undefined) {
      if (!ca.includes('-----BEGIN CERTIFICATE-----'))
        throw new ConfigError(`sinks.${config.name}.ca_file`, `${config.ca_file} holds no PEM certificate`);
      ssl.ca = ca;
    }
    const cert = read('cert_file');
    const key = read('key_file');
    if (cert !== undefined) ssl.cert = cert;
    if (key !== undefined) ssl.key = key;
    if (mode === 'verify-ca') ssl.checkServerIdentity = () => undefined;
  }
  const user = url.username ? `${decodeURIComponent(url.username)}@` : '';
  const target = `postgres://${user}${url.host}${url.pathname}`;
  return { connectionString: stripped ? cleaned.href : url.href, ssl, target };
}

/** Feed position: the scheduling feed lists by id, the workflow feed by timestamp then id. */
function newer(a: Change, b: Change): boolean {
  if (a.service === 'workflow' && a.occurred_at !== b.occurred_at) return a.occurred_at > b.occurred_at;
  return a.event_id > b.event_id;
}

/** What one batch writes: the JSON of its changes and, per round, the ordinals upserting subjects. */
interface Plan {
  json: string;
  /** 1-based positions in `json`'s array; round i holds the i-th change (by feed position) of each subject. */
  rounds: number[][];
}

/**
 * PostgreSQL's text and jsonb cannot hold U+0000, nor a lone UTF-16 surrogate (JSON.stringify
 * writes both as \u escapes): those become U+FFFD, so one odd string never blocks a batch.
 */
const UNSTORABLE = /(?<!\\)((?:\\\\)*)\\u(?:0000|d[89a-f][0-9a-f]{2})/g;
function storableJson(changes: Partial<Change>[]): string {
  const json = JSON.stringify(changes);
  return json.includes('\\u0000') || /\\ud[89a-f]/.test(json) ? json.replace(UNSTORABLE, '$1\\ufffd') : json;
}

/** The fields of a change the subjects upsert reads (the names its SQL uses). */
function upsertFields(c: Change): Partial<Change> {
  return {
    key: c.key,
    source: c.source,
    service: c.service,
    event_id: c.event_id,
    resource_type: c.resource_type,
    occurred_at: c.occurred_at,
    subject_url: c.subject_url,
    subject_state: c.subject_state,
    subject: c.subject_state === 'present' ? c.subject : null,
  };
}

/** How long a connection (TCP, TLS, authentication) may take, and a checkout may wait for one. */
const CONNECT_TIMEOUT_MS = 10_000;

export async function openPostgresSink(config: PostgresSinkConfig, ctx: SinkContext): Promise<Sink> {
  const settings = connectionSettings(config, ctx.configDir);
  // Loaded only when a postgres sink is configured.
  const { default: pg } = await import('pg');
  const poolConfig: PoolConfig = {
    connectionString: settings.connectionString,
    ssl: settings.ssl,
    max: config.pool_size,
    idleTimeoutMillis: 30_000,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    keepAlive: true,
    application_name: `feedsync ${config.name}`,
    statement_timeout: config.statement_timeout_ms,
    // A process frozen mid-transaction must not hold the fence and row locks for ever.
    idle_in_transaction_session_timeout: Math.max(config.statement_timeout_ms, 5000),
    // A server that stops answering (no RST, no FIN) fails the query instead of holding its slot.
    query_timeout: config.statement_timeout_ms + 5000,
  };
  const pool = new pg.Pool(poolConfig);
  const sink = new PostgresMirrorSink(config, settings.target, pool, ctx);
  // An idle connection the server closes (restart, admin shutdown) is reported here; without a
  // listener it would be an uncaught error. The next checkout opens a new one.
  pool.on('error', (err) => sink.idleError(err));
  await sink.start();
  return sink;
}

/**
 * An error the server reported on a live connection (a SQLSTATE outside the connection-loss
 * classes), except a prepared statement whose result type changed under it (0A000).
 */
function serverError(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return (
    typeof code === 'string' &&
    /^[0-9A-Z]{5}$/.test(code) &&
    !code.startsWith('08') &&
    !code.startsWith('57P') &&
    code !== '0A000'
  );
}

type Problem = 'transient' | 'auth' | 'permission' | 'database' | 'tls' | 'schema' | 'data' | 'other';

/** The problems an operator has to fix (logged as errors, with what to do). */
const OPERATOR_PROBLEMS = new Set<Problem>(['auth', 'permission', 'database', 'tls', 'schema']);

/** SQLSTATEs (and Node socket and TLS errors) by what the operator has to do about them. */
function classify(err: unknown): Problem {
  if (err instanceof NewerSchemaError || err instanceof BadSchemaError) return 'schema';
  const code = (err as { code?: unknown }).code;
  if (typeof code !== 'string') return 'transient'; // pg's own connection errors carry no code
  if (code === '28P01' || code === '28000') return 'auth';
  if (code === '42501') return 'permission';
  if (code === '3D000') return 'database';
  // Node's certificate verification: SELF_SIGNED_CERT_IN_CHAIN, ERR_TLS_CERT_ALTNAME_INVALID, …
  if (/CERT|SELF_SIGNED|UNABLE_TO_(GET|VERIFY)/.test(code)) return 'tls';
  if (['42P01', '42703', '42P10', '3F000', '42704', '42804', '42809'].includes(code)) return 'schema';
  if (code.startsWith('22')) return 'data';
  if (
    /^E[A-Z]+$/.test(code) || // ECONNREFUSED, ECONNRESET, ETIMEDOUT, EPIPE, ENOTFOUND, …
    ['08', '53', '57', '58', '40', 'XX', '55'].includes(code.slice(0, 2)) ||
    code === '25P03'
  )
    return 'transient';
  return 'other';
}

const HINTS: Partial<Record<Problem, string>> = {
  auth: "check the user and password in the sink's url (or url_file) and the server's pg_hba.conf",
  database: "check the database name in the sink's url",
  tls: "the server's certificate is not trusted: set the sink's ca_file to the CA that signed it (or reject_unauthorized: false to encrypt without verifying)",
  permission:
    'grant the role USAGE on the schema and SELECT, INSERT, UPDATE on its tables (and CREATE on the schema, or on the database, to let feedsync create them; migrating tables of an earlier version needs their owner): see docs/sinks.md, "postgres"',
  schema:
    "the mirror's tables are not what feedsync created: restore them, or drop the schema and let feedsync recreate it",
};

/** How often (at most) the same kind of operator-facing problem is logged. */
const PROBLEM_LOG_INTERVAL_MS = 60_000;

class PostgresMirrorSink implements Sink {
  private readonly schema: string;
  private readonly sql: { upsert: QueryConfig; fenceCheck: string; fenceRaise: string };
  /** Per lease scope, the token this process has committed under (then a shared lock suffices). */
  private readonly fences = new Map<string, number>();
  private migrated = false;
  private migrating: Promise<void> | undefined;
  private closing: Promise<void> | undefined;
  private readonly logged = new Map<Problem, number>();
  private failing = false;

  constructor(
    private readonly config: PostgresSinkConfig,
    private readonly target: string,
    private readonly pool: Pool,
    private readonly ctx: SinkContext,
  ) {
    this.schema = config.schema;
    const s = quoteIdent(config.schema);
    this.sql = {
      upsert: {
        name: `feedsync-upsert-${config.changes ? 'log' : 'nolog'}`,
        text: upsertSql(s, config.changes),
      },
      fenceCheck: `SELECT token FROM ${s}.fences WHERE scope = $1 FOR SHARE`,
      fenceRaise: `INSERT INTO ${s}.fences AS f (scope, token) VALUES ($1, $2)
        ON CONFLICT (scope) DO UPDATE SET token = greatest(f.token, excluded.token) RETURNING token`,
    };
  }

  private get where(): string {
    return `sink "${this.config.name}": ${this.target} schema ${this.schema}`;
  }

  /**
   * Migrates at start-up. A schema written by a newer feedsync, or tables changed by someone else,
   * stop start-up with the reason; a database that cannot be reached (or refuses the role) is
   * logged and migrated again before the first delivery, so the other sinks carry on meanwhile.
   */
  async start(): Promise<void> {
    try {
      await this.ensureMigrated();
    } catch (err) {
      const cause = (err as { cause?: unknown }).cause ?? err;
      if (cause instanceof NewerSchemaError || cause instanceof BadSchemaError) {
        await this.pool.end().catch(() => undefined);
        throw new FeedsyncError(`${this.where}: ${cause.message}`, false, { cause });
      }
      // ensureMigrated logged it; deliveries retry the migration.
    }
  }

  private ensureMigrated(): Promise<void> {
    if (this.migrated) return Promise.resolve();
    this.migrating ??= (async () => {
      let client: PoolClient | undefined;
      try {
        client = await this.checkout();
        const result = await migrate(client, this.schema, feedsyncVersion());
        this.migrated = true;
        logMigration(this.ctx.logger, 'postgres', { schema: this.schema }, result);
      } catch (err) {
        client?.release(true);
        client = undefined;
        throw this.failure(err, 'cannot prepare the mirror schema');
      } finally {
        client?.release();
        this.migrating = undefined;
      }
    })();
    return this.migrating;
  }

  /**
   * A connection of the pool, listened to while it is ours. The pool stops listening for its
   * errors when it hands it out, and the server's message ending a connection (a shutdown or
   * restart, 57P01) can come in the same packet as the answer before it — the startup's, or our
   * last query's — when no query is active: unheard, it would be an uncaught error. So the listener
   * is attached in the pool's callback, before anything else can run. The next query on such a
   * connection fails, and the connection is closed.
   */
  private checkout(): Promise<PoolClient> {
    return new Promise((resolve, reject) => {
      this.pool.connect((err, client) => {
        if (err || !client) {
          reject(err ?? new Error('no connection'));
          return;
        }
        const heard = (error: Error) => this.idleError(error);
        client.on('error', heard);
        const release = client.release.bind(client);
        client.release = (broken?: Error | boolean) => {
          client.removeListener('error', heard);
          release(broken);
        };
        resolve(client);
      });
    });
  }

  /** The batch's changes without duplicate keys; per subject, in feed order, split into rounds. */
  private plan(changes: Change[]): Plan | undefined {
    const seen = new Set<string>();
    const unique: Change[] = [];
    for (const c of changes)
      if (!seen.has(c.key)) {
        seen.add(c.key);
        unique.push(c);
      }
    // Changes without a subject URL have no row; gone (404 while fetching) records nothing: its
    // *_deleted change follows and tombstones the row.
    const writes = (c: Change) => c.subject_url !== null && c.subject_state !== 'gone';
    const listed = this.config.changes ? unique : unique.filter(writes);
    if (listed.length === 0) return undefined;
    // One row per (source, subject_url); a source name holds no NUL.
    const bySubject = new Map<string, number[]>();
    listed.forEach((c, i) => {
      if (!writes(c)) return;
      const row = `${c.source}\u0000${c.subject_url!}`;
      const at = bySubject.get(row);
      if (at) at.push(i);
      else bySubject.set(row, [i]);
    });
    // A batch from the queue never holds two changes of one subject (one round). Otherwise they
    // apply one round each, oldest first, exactly as one-by-one deliveries would.
    const rounds: number[][] = [];
    for (const indexes of bySubject.values()) {
      if (indexes.length > 1) indexes.sort((a, b) => (newer(listed[a]!, listed[b]!) ? 1 : -1));
      indexes.forEach((index, round) => (rounds[round] ??= []).push(index + 1));
    }
    if (rounds.length === 0) rounds.push([]);
    // Without the log, only what the upsert reads is sent (source_rule, event_url… can be large).
    return { json: storableJson(this.config.changes ? listed : listed.map(upsertFields)), rounds };
  }

  async deliverBatch(changes: Change[], context?: DeliveryContext): Promise<void> {
    return this.write(changes, context, false);
  }

  async deliver(change: Change, context?: DeliveryContext): Promise<void> {
    return this.write([change], context, true);
  }

  private async write(
    changes: Change[],
    context: DeliveryContext | undefined,
    single: boolean,
  ): Promise<void> {
    if (this.closing) throw new RetryLaterError(`${this.where}: closed, not writing`);
    const plan = this.plan(changes);
    if (!plan) return;
    await this.ensureMigrated();
    let client: PoolClient;
    try {
      client = await this.checkout();
    } catch (err) {
      throw this.failure(err, 'cannot connect');
    }
    const fence = context?.fence;
    const transaction = fence !== undefined || plan.rounds.length > 1;
    let broken: Error | undefined;
    try {
      if (transaction) await client.query('BEGIN');
      if (fence) await this.checkFence(client, fence);
      for (const round of plan.rounds) await client.query({ ...this.sql.upsert, values: [plan.json, round] });
      if (fence && !fence.valid())
        throw new StaleWriterError(
          `${this.where}: the lease of ${fence.scope} (token ${fence.token}) ran out before the commit; not committing`,
        );
      if (transaction) await client.query('COMMIT');
      if (fence) this.fences.set(fence.scope, fence.token);
      this.recovered();
    } catch (err) {
      // After an error the server reported, ROLLBACK leaves the connection as good as new. After
      // any other (a lost socket, a query past query_timeout) its state is unknown: it is closed.
      const reusable =
        (err instanceof StaleWriterError || serverError(err)) &&
        (!transaction ||
          (await client.query('ROLLBACK').then(
            () => true,
            () => false,
          )));
      if (!reusable) broken = err instanceof Error ? err : new Error(String(err));
      if (err instanceof StaleWriterError) throw err;
      const first = changes[0]?.key ?? '-';
      const what = single ? `cannot apply ${first}` : `cannot apply ${changes.length} changes from ${first}`;
      throw this.failure(err, what, single);
    } finally {
      client.release(broken);
    }
  }

  /**
   * Inside the batch's transaction: refuse a token lower than the one stored for its scope, store a
   * higher one. Once this process has committed under its token, a shared row lock is enough (the
   * batches of one process do not wait for each other); raising the token takes the row's
   * exclusive lock, so it waits for every transaction that checked the old one.
   */
  private async checkFence(client: PoolClient, fence: DeliveryFence): Promise<void> {
    if (this.fences.get(fence.scope) === fence.token) {
      const found = await client.query(this.sql.fenceCheck, [fence.scope]);
      const stored = found.rows[0] ? Number((found.rows[0] as { token: string }).token) : undefined;
      if (stored === fence.token) return;
      if (stored !== undefined && stored > fence.token) throw this.stale(fence, stored);
    }
    const raised = await client.query(this.sql.fenceRaise, [fence.scope, fence.token]);
    const stored = Number((raised.rows[0] as { token: string }).token);
    if (stored > fence.token) throw this.stale(fence, stored);
  }

  private stale(fence: DeliveryFence, stored: number): StaleWriterError {
    this.fences.delete(fence.scope);
    return new StaleWriterError(
      `${this.where}: refused a write under ${fence.scope} token ${fence.token}: token ${stored} already wrote (this process lost its lease)`,
    );
  }

  /** The error a delivery throws, logged first when the operator has something to fix. */
  private failure(err: unknown, what: string, single = false): Error {
    if (err instanceof StaleWriterError) return err;
    const problem = classify(err);
    // The schema errors' own messages say what to do.
    const ownMessage = err instanceof NewerSchemaError || err instanceof BadSchemaError;
    const hint = ownMessage ? undefined : HINTS[problem];
    const message = `${this.where}: ${what}: ${errorMessage(err)}${hint ? ` (${hint})` : ''}`;
    if (problem === 'data' && single) return new NeverError(message, { cause: err });
    const now = Date.now();
    if (OPERATOR_PROBLEMS.has(problem)) {
      if (now - (this.logged.get(problem) ?? 0) >= PROBLEM_LOG_INTERVAL_MS) {
        this.logged.set(problem, now);
        this.ctx.logger.error({ problem }, message);
      }
    } else if (!this.failing) {
      this.ctx.logger.warn({ problem }, message);
    }
    this.failing = true;
    return new RetryLaterError(message, undefined, { cause: err });
  }

  private recovered(): void {
    if (!this.failing) return;
    this.failing = false;
    this.logged.clear();
    this.ctx.logger.info(`${this.where}: writing again`);
  }

  idleError(err: Error): void {
    this.ctx.logger.debug({ err: errorMessage(err) }, 'idle postgres connection closed');
  }

  /**
   * The pool's state: true while its connections work (the last write succeeded); after a failure,
   * or before the first connection, whether one answers `SELECT 1` within 2 s.
   */
  async healthy(): Promise<boolean> {
    if (this.closing) return false;
    if (!this.failing && this.pool.totalCount > 0) return true;
    let timer: NodeJS.Timeout | undefined;
    try {
      const probe = this.pool.query('SELECT 1').then(() => true);
      const late = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), 2000);
        timer.unref();
      });
      return await Promise.race([probe, late]);
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  close(): Promise<void> {
    // end() waits for the connections in use to be released: deliveries in flight finish first.
    this.closing ??= this.pool.end().catch((err: unknown) => {
      this.ctx.logger.warn({ err: errorMessage(err) }, 'postgres sink close failed');
    });
    return this.closing;
  }
}

/**
 * The batch's upsert: $1 is the JSON array of its changes, $2 the positions in it that upsert a
 * subject row (one per subject). With `changes: true` a data-modifying CTE first logs every change
 * of $1 (a key already logged is skipped), in the same statement.
 */
function upsertSql(s: string, logChanges: boolean): string {
  const log = logChanges
    ? `, logged AS (
        INSERT INTO ${s}.changes (key, source, service, event_id, event_type, resource_type, operation,
                                  occurred_at, subject_url, subject_state, change)
        SELECT c->>'key', c->>'source', c->>'service', (c->>'event_id')::bigint, c->>'event_type',
               c->>'resource_type', c->>'operation', (c->>'occurred_at')::timestamptz, c->>'subject_url',
               c->>'subject_state', c
        FROM batch
        ON CONFLICT (key) DO NOTHING)`
    : '';
  // A version-only row (skipped or unreadable: subject NULL, not deleted) keeps the subject and deleted flag.
  const versionOnly = 'excluded.subject IS NULL AND NOT excluded.deleted';
  return `WITH batch AS (
      SELECT e.c, e.n FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS e(c, n))${log}
    INSERT INTO ${s}.subjects AS s (subject_url, resource_type, service, source, subject, last_event_id,
                                   last_occurred_at, last_key, deleted, updated_at)
    SELECT c->>'subject_url', c->>'resource_type', c->>'service', c->>'source',
           CASE WHEN c->>'subject_state' = 'present' THEN c->'subject' END,
           (c->>'event_id')::bigint, (c->>'occurred_at')::timestamptz, c->>'key',
           c->>'subject_state' = 'deleted', now()
    FROM batch WHERE n = ANY ($2::bigint[])
    ORDER BY c->>'subject_url', c->>'source'
    ON CONFLICT (source, subject_url) DO UPDATE SET
      resource_type = excluded.resource_type, service = excluded.service,
      subject = CASE WHEN ${versionOnly} THEN s.subject ELSE excluded.subject END,
      deleted = CASE WHEN ${versionOnly} THEN s.deleted ELSE excluded.deleted END,
      last_event_id = excluded.last_event_id, last_occurred_at = excluded.last_occurred_at,
      last_key = excluded.last_key, updated_at = excluded.updated_at
    WHERE ${NEWER}`;
}

/**
 * Newer by position in the source's feed: the scheduling feed lists by id; the workflow feed lists
 * by timestamp (its spec), so there a change is newer by (occurred_at, id) — a *_deleted event with
 * a lower id than the last change applied, but listed after it, must still apply. The conflict
 * target is the row of the change's own source, so positions of one feed only are compared.
 */
export const NEWER = `CASE WHEN excluded.service = 'workflow'
      THEN (excluded.last_occurred_at, excluded.last_event_id) > (s.last_occurred_at, s.last_event_id)
      ELSE excluded.last_event_id > s.last_event_id END`;

export const postgresSink = {
  type: 'postgres',
  schema: postgresSinkSchema,
  open: (config, ctx) => openPostgresSink(config, ctx),
} satisfies SinkDefinition<PostgresSinkConfig>;
