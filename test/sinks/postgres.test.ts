// The postgres mirror sink against a real PostgreSQL (a private cluster started here): the
// conformance suite, ordering by feed position, copies, tombstones, fencing, the changes log,
// migrations under the advisory lock, a newer or altered schema, least-privilege roles, wrong
// passwords, TLS, and its config keys (url_file, redaction).
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { validateConfig } from '../../src/config/load.js';
import { collectSecrets, redactConfig } from '../../src/config/redact.js';
import type { Change } from '../../src/core/change.js';
import { NeverError, RetryLaterError } from '../../src/core/errors.js';
import { openPostgresSink, postgresSinkSchema, type PostgresSinkConfig } from '../../src/sinks/postgres.js';
import { SCHEMA_VERSION } from '../../src/sinks/postgres-schema.js';
import type { DeliveryContext, Sink } from '../../src/sinks/sink.js';
import { describeSinkConformance } from '../../src/testing/conformance.js';
import { startPostgres, type PostgresServer } from '../support/postgres.js';
import { capturingContext as captureLog } from './support/capture-log.js';
import { BASE, makeChange, nextEventId, testContext } from './support/make-change.js';

let server: PostgresServer;
let admin: pg.Pool;
let root: string;

beforeAll(async () => {
  [server, root] = await Promise.all([
    startPostgres({ tls: true }),
    mkdtemp(join(tmpdir(), 'feedsync-pg-sink-')),
  ]);
  admin = new pg.Pool({ connectionString: server.url, max: 4 });
  admin.on('error', (err) => {
    throw new Error(`the test's own connection failed: ${err.message}`);
  });
});
afterAll(async () => {
  await admin?.end();
  server?.stop();
  await rm(root, { recursive: true, force: true });
});

const sql = async <T = Record<string, unknown>>(text: string, values: unknown[] = []): Promise<T[]> =>
  (await admin.query(text, values)).rows as T[];

function config(schema: string, extra: Partial<PostgresSinkConfig> = {}): PostgresSinkConfig {
  return postgresSinkSchema.parse({ name: 'postgres', type: 'postgres', url: server.url, schema, ...extra });
}

/** What schema_migrations holds once migrated: each version once. */
const everyVersion = Array.from({ length: SCHEMA_VERSION }, (_, i) => ({ version: i + 1 }));

/** A fresh schema name per test: every test starts from an empty mirror. */
const freshSchema = () => `t${nextEventId()}`;

/** A logger whose JSON lines are kept, to check what the operator is told. */
const capturingContext = (name = 'postgres') => captureLog(name, root);

interface Row {
  subject_url: string;
  resource_type: string;
  service: string;
  source: string;
  subject: Record<string, unknown> | null;
  last_event_id: string;
  last_occurred_at: Date;
  last_key: string;
  updated_at: Date;
  deleted: boolean;
}

const errorOf = (p: Promise<unknown>): Promise<unknown> =>
  p.then(
    () => undefined,
    (e: unknown) => e,
  );

describe('postgres mirror sink', () => {
  const conformanceSchema = 'conformance';
  let locker: pg.PoolClient | undefined;
  describeSinkConformance('postgres', {
    open: () =>
      openPostgresSink(
        config(conformanceSchema, { statement_timeout_ms: 500 }),
        testContext('postgres', root),
      ),
    delivered: async () =>
      (
        await sql<{ last_key: string }>(
          `SELECT last_key FROM ${conformanceSchema}.subjects ORDER BY updated_at`,
        )
      ).map((r) => r.last_key),
    // Another session holds the table: the write waits past statement_timeout (57014), retry-later.
    breakRetry: async () => {
      locker = await admin.connect();
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE ${conformanceSchema}.subjects IN ACCESS EXCLUSIVE MODE`);
    },
    heal: async () => {
      await locker?.query('ROLLBACK');
      locker?.release();
      locker = undefined;
    },
  });

  let schema: string;
  let sink: Sink | undefined;
  afterEach(async () => {
    await sink?.close();
    sink = undefined;
  });
  async function openFresh(extra: Partial<PostgresSinkConfig> = {}): Promise<Sink> {
    schema = freshSchema();
    const opened = await openPostgresSink(config(schema, extra), testContext('postgres', root));
    sink = opened;
    return opened;
  }
  const row = async (url: string): Promise<Row | undefined> =>
    (await sql<Row>(`SELECT * FROM ${schema}.subjects WHERE subject_url = $1`, [url]))[0];
  const about = (subjectId: number, eventId: number, fields: Partial<Change> = {}): Change =>
    makeChange({ subjectId, event_id: eventId, ...fields });
  const fence = (token: number, valid = true): DeliveryContext => ({
    fence: { scope: 'store:/x', token, valid: () => valid },
  });

  it('stores the subject as jsonb with its position, queryable with jsonb paths', async () => {
    const s = await openFresh();
    const change = about(1, 10);
    await s.deliver(change);
    expect(await row(change.subject_url!)).toMatchObject({
      subject_url: `${BASE}/api/titles/1`,
      resource_type: 'title',
      service: 'scheduling',
      source: 'scheduling',
      subject: change.subject,
      last_event_id: '10',
      last_occurred_at: new Date(change.occurred_at),
      last_key: 'scheduling:10',
      deleted: false,
    });
    const names = await sql(
      `SELECT subject->>'name' AS name FROM ${schema}.live_subjects WHERE resource_type = 'title'`,
    );
    expect(names).toEqual([{ name: change.subject!.name }]);
    expect(await sql(`SELECT version FROM ${schema}.schema_migrations ORDER BY version`)).toEqual(
      everyVersion,
    );
  });

  it('never lets an older event overwrite a newer one; a copy is a no-op', async () => {
    const s = await openFresh();
    const newer = about(2, 20);
    await s.deliver(newer);
    const before = await row(newer.subject_url!);
    await s.deliver(about(2, 15, { subject: { resource_type: 'title', id: 2, name: 'stale' } }));
    await s.deliver({ ...newer, subject: { resource_type: 'title', id: 2, name: 'tampered copy' } });
    await s.deliverBatch!([newer, newer]);
    expect(await row(newer.subject_url!)).toEqual(before);
  });

  it('orders a workflow subject by (timestamp, id): a later *_deleted with a lower id applies', async () => {
    const s = await openFresh();
    const wf = { service: 'workflow' as const, source: 'workflow' };
    const updated = about(2, 50, { ...wf, occurred_at: '2026-11-20T10:00:00.000Z' });
    const deleted = about(2, 40, {
      ...wf,
      event_type: 'job_deleted',
      operation: 'deleted',
      subject_state: 'deleted',
      subject: null,
      occurred_at: '2026-11-20T10:00:05.000Z',
    });
    await s.deliver(updated);
    await s.deliver(deleted);
    expect(await row(updated.subject_url!)).toMatchObject({
      deleted: true,
      subject: null,
      last_event_id: '40',
    });
    // The older one again, late: nothing changes, the subject stays deleted.
    await s.deliver(updated);
    expect(await row(updated.subject_url!)).toMatchObject({ deleted: true, last_event_id: '40' });
    // Same within one batch, in either order: the deletion wins.
    const deleted3 = about(3, 41, { ...deleted, ...wf, key: 'workflow:41', event_id: 41 });
    const updated3 = about(3, 51, { ...wf, occurred_at: '2026-11-20T10:00:00.000Z' });
    await s.deliverBatch!([{ ...deleted3, subject_url: updated3.subject_url }, updated3]);
    expect(await row(`${BASE}/api/titles/3`)).toMatchObject({ deleted: true, last_event_id: '41' });
  });

  it('tombstones a deleted subject so a late older change cannot resurrect it; a newer one can', async () => {
    const s = await openFresh();
    await s.deliver(about(4, 40));
    const deleted = about(4, 42, {
      event_type: 'title_deleted',
      operation: 'deleted',
      subject_state: 'deleted',
    });
    await s.deliver(deleted);
    await s.deliver(about(4, 41));
    expect(await row(deleted.subject_url!)).toMatchObject({
      deleted: true,
      subject: null,
      last_event_id: '42',
      last_key: deleted.key,
    });
    expect(await sql(`SELECT count(*)::int AS n FROM ${schema}.live_subjects`)).toEqual([{ n: 0 }]);
    const recreated = about(4, 43, { event_type: 'title_created', operation: 'created' });
    await s.deliver(recreated);
    expect(await row(recreated.subject_url!)).toMatchObject({ deleted: false, subject: recreated.subject });
  });

  it('records nothing for gone, only the version for skipped, nothing without a subject URL', async () => {
    const s = await openFresh();
    const present = about(5, 50);
    await s.deliver(present);
    const before = await row(present.subject_url!);
    await s.deliver(about(5, 51, { subject_state: 'gone', subject: null }));
    expect(await row(present.subject_url!)).toEqual(before);
    await s.deliver(about(6, 52, { subject_state: 'gone', subject: null }));
    expect(await row(`${BASE}/api/titles/6`)).toBeUndefined();

    const skipped = about(5, 53, { subject_state: 'skipped', subject: null });
    await s.deliver(skipped);
    expect(await row(present.subject_url!)).toMatchObject({
      subject: present.subject,
      last_event_id: '53',
      last_key: skipped.key,
      deleted: false,
    });
    await s.deliver(about(8, 80, { subject_state: 'skipped', subject: null }));
    expect(await row(`${BASE}/api/titles/8`)).toMatchObject({
      subject: null,
      last_event_id: '80',
      deleted: false,
    });
    // A present change and a later skipped one of the same subject in one batch: both apply, in order.
    const p = about(9, 90);
    await s.deliverBatch!([about(9, 91, { subject_state: 'skipped', subject: null }), p]);
    expect(await row(p.subject_url!)).toMatchObject({ subject: p.subject, last_event_id: '91' });

    await s.deliver(makeChange({ subject_url: null, subject_state: 'skipped', subject: null }));
    expect(await sql(`SELECT count(*)::int AS n FROM ${schema}.subjects`)).toEqual([{ n: 3 }]);
  });

  it('applies a batch of many subjects in one transaction, and stores strings jsonb cannot hold', async () => {
    const s = await openFresh();
    const batch = Array.from({ length: 300 }, (_, i) => about(1000 + i, nextEventId()));
    const odd = about(2000, nextEventId(), {
      subject: {
        resource_type: 'title',
        id: 2000,
        name: 'nul\u0000 and lone \ud800 surrogate, \\u0000 literal',
      },
    });
    await s.deliverBatch!([...batch, odd]);
    expect(await sql(`SELECT count(*)::int AS n FROM ${schema}.live_subjects`)).toEqual([{ n: 301 }]);
    expect((await row(odd.subject_url!))!.subject).toEqual({
      resource_type: 'title',
      id: 2000,
      name: 'nul\ufffd and lone \ufffd surrogate, \\u0000 literal',
    });
  });

  it('refuses, in the same transaction, a write under a lower fencing token than one already applied', async () => {
    const s = await openFresh();
    await s.deliver(about(3, 10), fence(2));
    const refused = await errorOf(s.deliver(about(3, 11), fence(1)));
    expect(refused).toBeInstanceOf(RetryLaterError);
    expect((refused as Error).name).toBe('StaleWriterError');
    expect((refused as Error).message).toMatch(/store:\/x token 1: token 2 already wrote/);
    expect(await row(about(3, 10).subject_url!)).toMatchObject({ last_event_id: '10' });
    await expect(s.deliverBatch!([about(3, 12), about(30, 12_000)], fence(1))).rejects.toThrow(
      /lost its lease/,
    );
    expect(await row(about(30, 1).subject_url!)).toBeUndefined();
    // The lease ran out while the batch was being written: nothing is committed.
    await expect(s.deliver(about(3, 13), fence(2, false))).rejects.toThrow(/ran out before the commit/);
    expect(await row(about(3, 10).subject_url!)).toMatchObject({ last_event_id: '10' });
    await s.deliver(about(3, 14), fence(3));
    expect(await row(about(3, 14).subject_url!)).toMatchObject({ last_event_id: '14' });
    expect(await sql(`SELECT scope, token FROM ${schema}.fences`)).toEqual([
      { scope: 'store:/x', token: '3' },
    ]);
    // Another process (another sink instance) still under token 2 is refused too.
    const stale = await openPostgresSink(config(schema), testContext('postgres', root));
    try {
      await expect(stale.deliverBatch!([about(3, 15)], fence(2))).rejects.toThrow(
        /token 2: token 3 already wrote/,
      );
    } finally {
      await stale.close();
    }
  });

  it('with changes: true, logs every change once (gone and URL-less ones too) beside the mirror', async () => {
    const s = await openFresh({ changes: true });
    const present = about(11, 110);
    const gone = about(12, 111, { subject_state: 'gone', subject: null });
    const noUrl = makeChange({ subject_url: null, subject_state: 'skipped', subject: null });
    await s.deliverBatch!([present, gone, noUrl], fence(1));
    await s.deliverBatch!([present, gone], fence(1));
    await s.deliver(present);
    const logged = await sql<{ key: string; subject_state: string; event_id: string; change: Change }>(
      `SELECT key, subject_state, event_id, change FROM ${schema}.changes ORDER BY event_id`,
    );
    expect(logged.map((r) => r.key).sort()).toEqual([present.key, gone.key, noUrl.key].sort());
    expect(logged.find((r) => r.key === present.key)!.change).toEqual(present);
    expect(logged.find((r) => r.key === gone.key)).toMatchObject({ subject_state: 'gone', event_id: '111' });
    expect(await sql(`SELECT count(*)::int AS n FROM ${schema}.subjects`)).toEqual([{ n: 1 }]);
  });

  it('migrates under the advisory lock: waits for its holder, and two sinks opening at once migrate once', async () => {
    schema = freshSchema();
    const holder = await admin.connect();
    try {
      await holder.query("SELECT pg_advisory_lock(hashtext('feedsync.migrate'), hashtext($1))", [schema]);
      let opened = false;
      const opening = openPostgresSink(config(schema), testContext('postgres', root)).then((s) => {
        opened = true;
        return s;
      });
      await new Promise((r) => setTimeout(r, 400));
      expect(opened, 'migrations must wait for the advisory lock').toBe(false);
      await holder.query("SELECT pg_advisory_unlock(hashtext('feedsync.migrate'), hashtext($1))", [schema]);
      sink = await opening;
    } finally {
      holder.release();
    }
    await sink.close();
    sink = undefined;

    const other = freshSchema();
    const sinks = await Promise.all(
      Array.from({ length: 4 }, () => openPostgresSink(config(other), testContext('postgres', root))),
    );
    try {
      await Promise.all(sinks.map((s, i) => s.deliver(about(20 + i, 200 + i))));
      expect(await sql(`SELECT version FROM ${other}.schema_migrations ORDER BY version`)).toEqual(
        everyVersion,
      );
      expect(await sql(`SELECT count(*)::int AS n FROM ${other}.subjects`)).toEqual([{ n: 4 }]);
    } finally {
      await Promise.all(sinks.map((s) => s.close()));
    }
  });

  it('refuses a schema written by a newer feedsync, and tables changed by someone else, naming what to fix', async () => {
    const s = await openFresh();
    await s.close();
    sink = undefined;
    await sql(`INSERT INTO ${schema}.schema_migrations (version, feedsync) VALUES (99, '9.9.9')`);
    await expect(openPostgresSink(config(schema), testContext('postgres', root))).rejects.toThrow(
      new RegExp(
        `sink "postgres": .*schema "${schema}" is at version 99, written by a newer feedsync.*upgrade feedsync`,
      ),
    );
    await sql(`DELETE FROM ${schema}.schema_migrations WHERE version = 99`);
    await sql(`ALTER TABLE ${schema}.subjects DROP COLUMN last_occurred_at CASCADE`);
    await expect(openPostgresSink(config(schema), testContext('postgres', root))).rejects.toThrow(
      /subjects lacks column\(s\) last_occurred_at.*changed outside feedsync/,
    );
    const foreign = freshSchema();
    await sql(`CREATE SCHEMA ${foreign}; CREATE TABLE ${foreign}.subjects (id int)`);
    await expect(openPostgresSink(config(foreign), testContext('postgres', root))).rejects.toThrow(
      /holds a table subjects that feedsync did not create.*choose another `schema`/,
    );
  });

  it('runs as a role with only the documented grants: CREATE on its schema, or DML on pre-created tables', async () => {
    // A role that owns nothing but may create in a schema made for it.
    await sql(`CREATE ROLE feedsync_owner LOGIN PASSWORD 'owner-pw'; CREATE SCHEMA granted;
               GRANT USAGE, CREATE ON SCHEMA granted TO feedsync_owner`);
    const asOwner = (s: string, extra: Partial<PostgresSinkConfig> = {}) =>
      openPostgresSink(
        config(s, { url: server.urlFor('feedsync_owner', 'owner-pw'), ...extra }),
        testContext('postgres', root),
      );
    const owner = await asOwner('granted', { changes: true });
    await owner.deliver(about(31, 310), fence(1));
    await owner.close();
    // A role that may only read and write the tables the first one created.
    await sql(`CREATE ROLE feedsync_writer LOGIN PASSWORD 'writer-pw'`);
    await sql(`GRANT USAGE ON SCHEMA granted TO feedsync_writer;
               GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA granted TO feedsync_writer`);
    const writer = await openPostgresSink(
      config('granted', { url: server.urlFor('feedsync_writer', 'writer-pw'), changes: true }),
      testContext('postgres', root),
    );
    try {
      await writer.deliverBatch!([about(31, 311), about(32, 312)], fence(2));
      await writer.deliver(about(33, 313), fence(2));
    } finally {
      await writer.close();
    }
    expect(
      await sql<{ subject_url: string; last_event_id: string }>(
        'SELECT subject_url, last_event_id FROM granted.subjects ORDER BY subject_url',
      ),
    ).toEqual([
      { subject_url: `${BASE}/api/titles/31`, last_event_id: '311' },
      { subject_url: `${BASE}/api/titles/32`, last_event_id: '312' },
      { subject_url: `${BASE}/api/titles/33`, last_event_id: '313' },
    ]);
    // A role without those grants: start-up carries on, deliveries retry with what to grant.
    await sql(
      `CREATE ROLE feedsync_nobody LOGIN PASSWORD 'nobody-pw'; GRANT USAGE ON SCHEMA granted TO feedsync_nobody`,
    );
    const { ctx, lines } = capturingContext();
    const nobody = await openPostgresSink(
      config('granted', { url: server.urlFor('feedsync_nobody', 'nobody-pw') }),
      ctx,
    );
    try {
      const err = await errorOf(nobody.deliver(about(34, 314)));
      expect(err).toBeInstanceOf(RetryLaterError);
      expect((err as Error).message).toMatch(
        /permission denied.*grant the role USAGE on the schema and SELECT, INSERT, UPDATE/,
      );
      expect(lines.some((l) => l.level === 50 && /permission denied/.test(String(l.msg)))).toBe(true);
    } finally {
      await nobody.close();
    }
  });

  it('a wrong password: start-up carries on, deliveries retry saying what to fix, the password never shown', async () => {
    const { ctx, lines } = capturingContext();
    const wrong = 'Wrong-Pw-LEAKCHECK';
    const s = await openPostgresSink(config(freshSchema(), { url: server.urlFor('postgres', wrong) }), ctx);
    sink = s;
    const err = await errorOf(s.deliver(about(40, 400)));
    expect(err).toBeInstanceOf(RetryLaterError);
    expect((err as Error).message).toMatch(
      /password authentication failed.*check the user and password in the sink's url/,
    );
    expect((err as Error).message).toContain('postgres://postgres@127.0.0.1');
    expect(lines.some((l) => l.level === 50 && /password authentication failed/.test(String(l.msg)))).toBe(
      true,
    );
    expect(JSON.stringify(lines) + (err as Error).message).not.toContain(wrong);
    expect(await s.healthy!()).toBe(false);
  });

  it('a database that cannot be reached: start-up carries on, deliveries retry, healthy() says so', async () => {
    const s = await openPostgresSink(
      config(freshSchema(), { url: 'postgres://postgres:x@127.0.0.1:1/postgres' }),
      testContext('postgres', root),
    );
    sink = s;
    const err = await errorOf(s.deliver(about(41, 410)));
    expect(err).toBeInstanceOf(RetryLaterError);
    expect((err as Error).message).toMatch(
      /sink "postgres": postgres:\/\/postgres@127\.0\.0\.1:1\/postgres .*ECONNREFUSED/,
    );
    expect(await s.healthy!()).toBe(false);
  });

  it('connections ended by the server while batches are written: retry-later, then writing again', async () => {
    const s = await openFresh();
    let stop = false;
    // Ends the sink's connections over and over, idle, checked out or mid-transaction.
    const terminator = (async () => {
      while (!stop) {
        await sql(
          "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'feedsync postgres' AND pid <> pg_backend_pid()",
        );
        await new Promise((r) => setTimeout(r, 3));
      }
    })();
    const failures: unknown[] = [];
    const written: Change[] = [];
    try {
      for (let i = 0; i < 60; i++) {
        const batch = Array.from({ length: 20 }, (_, j) => about(5000 + i * 20 + j, nextEventId()));
        await Promise.all(
          [batch.slice(0, 10), batch.slice(10)].map((part) =>
            s.deliverBatch!(part, fence(1)).then(
              () => written.push(...part),
              (err: unknown) => failures.push(err),
            ),
          ),
        );
      }
    } finally {
      stop = true;
      await terminator;
    }
    expect(failures.length, 'the terminations hit some batches').toBeGreaterThan(0);
    for (const err of failures) expect(err).toBeInstanceOf(RetryLaterError);
    const rows = await sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.subjects`);
    expect(rows[0]!.n).toBeGreaterThanOrEqual(written.length);
    await s.deliver(about(6000, nextEventId()), fence(1));
  });

  it('a change PostgreSQL can never store is a NeverError when delivered alone', async () => {
    const s = await openFresh();
    // A timestamp beyond timestamptz's range (year 300000) is a data error (22008).
    const bad = about(42, 420, { occurred_at: '+300000-01-01T00:00:00.000Z' });
    expect(await errorOf(s.deliver(bad))).toBeInstanceOf(NeverError);
    const batchErr = await errorOf(s.deliverBatch!([bad, about(43, 421)]));
    expect(batchErr).toBeInstanceOf(RetryLaterError);
    expect(batchErr).not.toBeInstanceOf(NeverError);
    expect(await s.healthy!()).toBe(true);
  });

  it('TLS: verifies the server against ca_file; refuses an unknown CA unless reject_unauthorized is false', async () => {
    const tlsUrl = `${server.url}?sslmode=verify-full`;
    const viaCa = await openPostgresSink(
      config(freshSchema(), { name: 'tls', url: tlsUrl, ca_file: server.caFile! }),
      testContext('tls', root),
    );
    try {
      await viaCa.deliver(about(50, 500));
      const ssl = await sql<{ ssl: boolean }>(
        `SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'feedsync tls'`,
      );
      expect(ssl.length).toBeGreaterThan(0);
      expect(ssl.every((r) => r.ssl)).toBe(true);
    } finally {
      await viaCa.close();
    }
    const unknownCa = await openPostgresSink(
      config(freshSchema(), { url: tlsUrl }),
      testContext('postgres', root),
    );
    try {
      const err = await errorOf(unknownCa.deliver(about(51, 510)));
      expect(err).toBeInstanceOf(RetryLaterError);
      expect((err as Error).message).toMatch(/certificate/);
    } finally {
      await unknownCa.close();
    }
    const unverified = await openPostgresSink(
      config(freshSchema(), { url: `${server.url}?sslmode=require`, reject_unauthorized: false }),
      testContext('postgres', root),
    );
    try {
      await unverified.deliver(about(52, 520));
    } finally {
      await unverified.close();
    }
  });
});

describe('postgres sink configuration', () => {
  const base = (sink: Record<string, unknown>) => ({
    sources: [
      { name: 's', service: 'scheduling', base_url: 'http://127.0.0.1:9/x', username: 'u', password: 'p' },
    ],
    sinks: [{ name: 'pg', type: 'postgres', ...sink }],
  });

  it('reads url_file, applies the defaults, and redacts the password wherever the url is shown', async () => {
    const file = join(root, 'pg-url');
    await writeFile(file, 'postgres://feedsync:S3cret-LEAKCHECK@db.internal:5432/app?password=Q-LEAKCHECK\n');
    const config = validateConfig(base({ url_file: file }), { dir: root });
    expect(config.sinks[0]).toMatchObject({
      type: 'postgres',
      url: 'postgres://feedsync:S3cret-LEAKCHECK@db.internal:5432/app?password=Q-LEAKCHECK',
      schema: 'feedsync',
      changes: false,
      pool_size: 4,
      statement_timeout_ms: 30000,
      reject_unauthorized: true,
    });
    const shown = JSON.stringify(redactConfig(config));
    expect(shown).not.toContain('LEAKCHECK');
    expect(shown).toContain('postgres://feedsync:<redacted>@db.internal:5432/app?password=<redacted>');
    expect(collectSecrets(config)).toEqual(expect.arrayContaining(['S3cret-LEAKCHECK', 'Q-LEAKCHECK']));
  });

  it('explains what is wrong, never echoing the url', () => {
    const problems = (sink: Record<string, unknown>) => {
      try {
        validateConfig(base(sink), { dir: root });
        return [];
      } catch (err) {
        return (err as Error).message.split('\n');
      }
    };
    expect(problems({})).toEqual(['sinks[0].url: required (or url_file)']);
    expect(problems({ url: 'mysql://u:LEAKCHECK@h/db' })).toEqual([
      'sinks[0].url: must be a postgres:// or postgresql:// URL (postgres://user:password@host:5432/database)',
    ]);
    expect(problems({ url: 'postgres://h/db', schema: 'Bad-Name' })[0]).toMatch(
      /^sinks\[0\]\.schema: must be a lower-case SQL identifier/,
    );
    expect(problems({ url: 'postgres://h/db', cert_file: join(root, 'pg-url') })).toEqual([
      'sinks[0].key_file: cert_file and key_file go together (a client certificate needs its key)',
    ]);
    expect(problems({ url: 'postgres://h/db?sslrootcert=/x.pem' })).toEqual([
      "sinks[0].url: sslrootcert in the URL is not supported: use the sink's ca_file, cert_file and key_file",
    ]);
    expect(problems({ url: 'postgres://h/db?sslmode=prefer' })[0]).toMatch(/sslmode=prefer is not supported/);
    expect(problems({ url: 'postgres://h/db', pool_size: 0 })).toEqual(['sinks[0].pool_size: must be >= 1']);
    expect(problems({ url: 'postgres://h/db', secret: 'x' })).toEqual(['sinks[0].secret: unknown key']);
  });
});
