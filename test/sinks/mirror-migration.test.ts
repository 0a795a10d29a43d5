// Upgrading mirrors written before rows were keyed by (source, subject_url): every row is kept
// under the source of its last change, the new key works, the migration is logged with its counts,
// and processes opening the same old mirror at once migrate it once.
import Database from 'better-sqlite3';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Change } from '../../src/core/change.js';
import { RetryLaterError } from '../../src/core/errors.js';
import { openPostgresSink, postgresSinkSchema } from '../../src/sinks/postgres.js';
import { SCHEMA_VERSION } from '../../src/sinks/postgres-schema.js';
import type { Sink } from '../../src/sinks/sink.js';
import { openSqliteSink } from '../../src/sinks/sqlite-mirror.js';
import { MIRROR_VERSION } from '../../src/sinks/sqlite-mirror-schema.js';
import { cliPath } from '../support/process.js';
import { startPostgres, type PostgresServer } from '../support/postgres.js';
import { capturingContext } from './support/capture-log.js';
import { BASE, makeChange } from './support/make-change.js';
import { createSqliteV2, oldRows, postgresV1, postgresV1Rows, type OldRow } from './support/mirror-v1.js';

let server: PostgresServer;
let admin: pg.Pool;
let root: string;
let serial = 0;

beforeAll(async () => {
  [server, root] = await Promise.all([startPostgres(), mkdtemp(join(tmpdir(), 'feedsync-mirror-mig-'))]);
  admin = new pg.Pool({ connectionString: server.url, max: 2 });
  admin.on('error', () => undefined);
});
afterAll(async () => {
  await admin?.end();
  server?.stop();
  await rm(root, { recursive: true, force: true });
});

const filter = { sources: [], services: [], event_types: [], resource_types: [] };

/** A row as both mirrors show it, whatever their column types. */
interface Row {
  subject_url: string;
  source: string;
  service: string;
  subject: Record<string, unknown> | null;
  last_event_id: number;
  last_key: string;
  deleted: boolean;
}

/** What the migration must make of an old row: the same, under the source its last_key names. */
function expected(r: OldRow): Row {
  const named = /^([^:]+):(\d+)$/.exec(r.last_key);
  const source = named && Number(named[2]) === r.last_event_id ? named[1]! : r.source;
  const { subject_url, service, subject, last_event_id, last_key, deleted } = r;
  return { subject_url, source, service, subject, last_event_id, last_key, deleted };
}

const bySourceAndUrl = (a: Row, b: Row) =>
  a.subject_url === b.subject_url
    ? a.source.localeCompare(b.source)
    : a.subject_url.localeCompare(b.subject_url);

/** A change of `source` about the subject at `url`. */
function about(url: string, source: string, eventId: number, fields: Partial<Change> = {}): Change {
  return makeChange({ source, event_id: eventId, subject_url: url, ...fields });
}

/** The migration's report line: one, with the fixture's counts (oldRows: 5, 1, 1). */
function expectReport(lines: Record<string, unknown>[], mirror: string, rows: number): void {
  const reports = lines.filter((l) => String(l.msg).includes('mirror rows keyed by (source, subject_url)'));
  expect(reports).toHaveLength(1);
  expect(reports[0]).toMatchObject({ level: 40, rows, reattributed: 1, unattributed: 1 });
  expect(String(reports[0]!.msg)).toMatch(
    new RegExp(
      `^${mirror} mirror rows keyed by \\(source, subject_url\\): ${rows} row\\(s\\) kept.*1 reattributed.*1 kept their source column`,
    ),
  );
}

describe('sqlite mirror: upgrade from rows keyed by subject_url', () => {
  const rowsOf = (path: string): Row[] => {
    const db = new Database(path, { readonly: true });
    try {
      return (
        db
          .prepare(
            'SELECT subject_url, source, service, subject, last_event_id, last_key, deleted FROM subjects',
          )
          .all() as (Omit<Row, 'subject' | 'deleted'> & { subject: string | null; deleted: number })[]
      )
        .map((r) => ({
          ...r,
          subject: r.subject === null ? null : (JSON.parse(r.subject) as Record<string, unknown>),
          deleted: r.deleted === 1,
        }))
        .sort(bySourceAndUrl);
    } finally {
      db.close();
    }
  };
  const open = (path: string, ctx = capturingContext('sqlite', root).ctx): Promise<Sink> =>
    openSqliteSink({ name: 'sqlite', type: 'sqlite', path, filter }, ctx);

  it('keeps every row under the source of its last change, logs the counts, and the new key works', async () => {
    const path = join(root, `old-${serial++}.db`);
    const old = oldRows(BASE);
    createSqliteV2(path, old);
    const { ctx, lines } = capturingContext('sqlite', root);
    const sink = await open(path, ctx);
    try {
      expect(rowsOf(path)).toEqual(old.map(expected).sort(bySourceAndUrl));
      expect(lines).toContainEqual(
        expect.objectContaining({ msg: 'sqlite mirror schema migrated', from: 2, to: MIRROR_VERSION, path }),
      );
      expectReport(lines, 'sqlite', old.length);
      const db = new Database(path, { readonly: true });
      try {
        expect(db.pragma('user_version', { simple: true })).toBe(MIRROR_VERSION);
        const key = (db.pragma('table_info(subjects)') as { name: string; pk: number }[])
          .filter((c) => c.pk > 0)
          .sort((a, b) => a.pk - b.pk)
          .map((c) => c.name);
        expect(key).toEqual(['subject_url', 'source']);
        expect(db.prepare('SELECT count(*) FROM live_subjects').pluck().get()).toBe(4);
        expect(db.prepare('SELECT token FROM fences WHERE scope = ?').pluck().get('store:/old')).toBe(7);
      } finally {
        db.close();
      }

      // The guard carries over per source: sched's older change is refused, its newer one applies;
      // another source's change of the same URL gets its own row; the reattributed row is beta's.
      const [one, , , four] = old;
      await sink.deliver(about(one!.subject_url, 'sched', 9));
      await sink.deliver(about(one!.subject_url, 'other', 1));
      await sink.deliver(about(four!.subject_url, 'beta', 39));
      await sink.deliver(about(four!.subject_url, 'beta', 41, { subject_state: 'deleted', subject: null }));
      const now = rowsOf(path);
      expect(
        now.filter((r) => r.subject_url === one!.subject_url).map((r) => [r.source, r.last_event_id]),
      ).toEqual([
        ['other', 1],
        ['sched', 10],
      ]);
      expect(now.find((r) => r.subject_url === four!.subject_url)).toMatchObject({
        source: 'beta',
        last_event_id: 41,
        deleted: true,
      });
    } finally {
      await sink.close();
    }

    // Reopened: nothing to migrate, nothing reported again.
    const again = capturingContext('sqlite', root);
    await (await open(path, again.ctx)).close();
    expect(again.lines.map((l) => l.msg)).toEqual(['sqlite mirror schema up to date']);
  });

  it('three processes opening the same old mirror at once: one migrates, the others wait and find it done', async () => {
    const path = join(root, `old-${serial++}.db`);
    const many = Array.from({ length: 2000 }, (_, i): OldRow => ({
      ...oldRows(BASE)[0]!,
      subject_url: `${BASE}/api/titles/${1000 + i}`,
      subject: { resource_type: 'title', id: 1000 + i, name: `title ${i}` },
      last_key: `sched:${i + 1}`,
      last_event_id: i + 1,
    }));
    createSqliteV2(path, many);
    const sinkModule = join(dirname(cliPath), 'sinks', 'sqlite-mirror.js');
    // Each child loads the sink, says "ready", opens the mirror on "go", writes one change of its own
    // source, and exits; pino's lines go to stdout.
    const script = `
      const { openSqliteSink } = await import(${JSON.stringify(sinkModule)});
      const { default: pino } = await import('pino');
      const me = process.argv[1];
      process.stdout.write('ready\\n');
      await new Promise((r) => process.stdin.once('data', r));
      const sink = await openSqliteSink(
        { name: 'sqlite', type: 'sqlite', path: ${JSON.stringify(path)}, filter: { sources: [], services: [], event_types: [], resource_types: [] } },
        { name: 'sqlite', configDir: '/', logger: pino({ base: { child: me } }) },
      );
      const url = ${JSON.stringify(`${BASE}/api/titles/1000`)};
      await sink.deliver({ ...${JSON.stringify(about(`${BASE}/api/titles/1000`, 'x', 1))}, source: me, key: me + ':1', subject_url: url });
      await sink.close();`;
    const children = ['p1', 'p2', 'p3'].map((name) => {
      const child = spawn(process.execPath, ['--input-type=module', '-e', script, name], {
        cwd: process.cwd(),
        stdio: ['pipe', 'pipe', 'inherit'],
      });
      let out = '';
      child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
      const ready = new Promise<void>((resolve) => {
        const check = () => (out.includes('ready\n') ? resolve() : setTimeout(check, 10));
        check();
      });
      const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
      return {
        child,
        ready,
        exited,
        lines: () =>
          out
            .split('\n')
            .filter((l) => l.startsWith('{'))
            .map((l) => JSON.parse(l) as Record<string, unknown>),
      };
    });
    await Promise.all(children.map((c) => c.ready));
    // The test holds the write lock while the three open the mirror: each reads schema 2 and waits
    // to migrate, so all three try at once when it lets go.
    const holder = new Database(path);
    holder.exec('BEGIN IMMEDIATE');
    for (const c of children) c.child.stdin.end('go\n');
    await new Promise((r) => setTimeout(r, 500));
    expect(
      children.map((c) => c.lines().length),
      'nobody opened it while the lock was held',
    ).toEqual([0, 0, 0]);
    holder.exec('ROLLBACK');
    holder.close();
    expect(await Promise.all(children.map((c) => c.exited))).toEqual([0, 0, 0]);

    const logs = children.flatMap((c) => c.lines());
    const migrated = logs.filter((l) => l.msg === 'sqlite mirror schema migrated');
    expect(migrated, 'migrated by exactly one process').toHaveLength(1);
    expect(migrated[0]).toMatchObject({ from: 2, to: MIRROR_VERSION });
    expect(logs.filter((l) => l.msg === 'sqlite mirror schema up to date')).toHaveLength(2);
    expect(logs.filter((l) => String(l.msg).includes('mirror rows keyed by'))).toEqual([
      expect.objectContaining({ rows: many.length, reattributed: 0, unattributed: 0, level: 30 }),
    ]);
    const rows = rowsOf(path);
    // Every old row kept, as it was, plus one row per process on a URL the old rows hold too.
    expect(rows.filter((r) => r.source === 'sched')).toEqual(many.map(expected).sort(bySourceAndUrl));
    expect(rows.filter((r) => r.source !== 'sched').map((r) => [r.source, r.subject_url])).toEqual(
      ['p1', 'p2', 'p3'].map((p) => [p, `${BASE}/api/titles/1000`]),
    );
  });
});

describe('postgres mirror: upgrade from rows keyed by subject_url', () => {
  const rowsOf = async (schema: string): Promise<Row[]> =>
    (
      (
        await admin.query(
          `SELECT subject_url, source, service, subject, last_event_id::float8 AS last_event_id, last_key, deleted
           FROM ${schema}.subjects`,
        )
      ).rows as Row[]
    ).sort(bySourceAndUrl);
  const open = (schema: string, ctx = capturingContext('postgres', root).ctx): Promise<Sink> =>
    openPostgresSink(
      postgresSinkSchema.parse({ name: 'postgres', type: 'postgres', url: server.url, schema }),
      ctx,
    );
  const oldSchema = async (rows: OldRow[]): Promise<string> => {
    const schema = `old${serial++}`;
    server.psql(postgresV1(schema));
    await admin.query(postgresV1Rows(schema, rows));
    return schema;
  };

  it('keeps every row under the source of its last change, logs the counts, and the new key works', async () => {
    const old = oldRows(BASE);
    const schema = await oldSchema(old);
    const { ctx, lines } = capturingContext('postgres', root);
    const sink = await open(schema, ctx);
    try {
      expect(await rowsOf(schema)).toEqual(old.map(expected).sort(bySourceAndUrl));
      expect(lines).toContainEqual(
        expect.objectContaining({
          msg: 'postgres mirror schema migrated',
          from: 1,
          to: SCHEMA_VERSION,
          schema,
        }),
      );
      expectReport(lines, 'postgres', old.length);
      const key = await admin.query(
        `SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
         WHERE i.indrelid = $1::regclass AND i.indisprimary ORDER BY array_position(i.indkey::int2[], a.attnum)`,
        [`${schema}.subjects`],
      );
      expect(key.rows.map((r: { attname: string }) => r.attname)).toEqual(['subject_url', 'source']);
      expect(
        (await admin.query(`SELECT version FROM ${schema}.schema_migrations ORDER BY version`)).rows,
      ).toEqual(Array.from({ length: SCHEMA_VERSION }, (_, i) => ({ version: i + 1 })));
      expect((await admin.query(`SELECT count(*)::int AS n FROM ${schema}.live_subjects`)).rows).toEqual([
        { n: 4 },
      ]);

      const [one, , , four] = old;
      await sink.deliver(about(one!.subject_url, 'sched', 9));
      await sink.deliverBatch!([about(one!.subject_url, 'other', 1), about(four!.subject_url, 'beta', 39)]);
      await sink.deliver(about(four!.subject_url, 'beta', 41, { subject_state: 'deleted', subject: null }));
      const now = await rowsOf(schema);
      expect(
        now.filter((r) => r.subject_url === one!.subject_url).map((r) => [r.source, r.last_event_id]),
      ).toEqual([
        ['other', 1],
        ['sched', 10],
      ]);
      expect(now.find((r) => r.subject_url === four!.subject_url)).toMatchObject({
        source: 'beta',
        last_event_id: 41,
        deleted: true,
      });
    } finally {
      await sink.close();
    }
    const again = capturingContext('postgres', root);
    await (await open(schema, again.ctx)).close();
    expect(again.lines.map((l) => l.msg)).toEqual(['postgres mirror schema up to date']);
  });

  it('a role that may only write rows cannot migrate: it says what is needed, retries, and writes once the owner migrated', async () => {
    const old = oldRows(BASE);
    const schema = await oldSchema(old);
    await admin.query(`CREATE ROLE ${schema}_rw LOGIN PASSWORD 'rw-pw';
      GRANT USAGE ON SCHEMA ${schema} TO ${schema}_rw;
      GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA ${schema} TO ${schema}_rw`);
    const { ctx, lines } = capturingContext('postgres', root);
    const rw = await openPostgresSink(
      postgresSinkSchema.parse({
        name: 'postgres',
        type: 'postgres',
        url: server.urlFor(`${schema}_rw`, 'rw-pw'),
        schema,
      }),
      ctx,
    );
    try {
      const change = about(old[0]!.subject_url, 'sched', 11);
      const refused = await rw.deliver(change).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(refused).toBeInstanceOf(RetryLaterError);
      expect((refused as Error).message).toMatch(/must be owner of table subjects.*needs their owner/);
      expect(lines).toContainEqual(expect.objectContaining({ level: 50, problem: 'permission' }));
      // Rolled back: the rows as they were, under their old source column.
      expect(await rowsOf(schema)).toEqual(
        old.map((r) => ({ ...expected(r), source: r.source })).sort(bySourceAndUrl),
      );
      // The owner starts once; the same sink then migrates nothing and writes.
      await (await open(schema)).close();
      await rw.deliver(change);
      expect((await rowsOf(schema)).find((r) => r.subject_url === change.subject_url)).toMatchObject({
        source: 'sched',
        last_event_id: 11,
      });
    } finally {
      await rw.close();
    }
  });

  it('four sinks opening the same old schema at once: migrated once, nothing lost', async () => {
    const old = oldRows(BASE);
    const schema = await oldSchema(old);
    const contexts = Array.from({ length: 4 }, () => capturingContext('postgres', root));
    const sinks = await Promise.all(contexts.map((c) => open(schema, c.ctx)));
    try {
      await Promise.all(sinks.map((s, i) => s.deliver(about(old[0]!.subject_url, `p${i}`, 1))));
    } finally {
      await Promise.all(sinks.map((s) => s.close()));
    }
    const logs = contexts.flatMap((c) => c.lines);
    expect(logs.filter((l) => l.msg === 'postgres mirror schema migrated')).toHaveLength(1);
    expect(logs.filter((l) => l.msg === 'postgres mirror schema up to date')).toHaveLength(3);
    expectReport(logs, 'postgres', old.length);
    const rows = await rowsOf(schema);
    expect(rows.filter((r) => !/^p\d$/.test(r.source))).toEqual(old.map(expected).sort(bySourceAndUrl));
    expect(rows.filter((r) => /^p\d$/.test(r.source)).map((r) => r.source)).toEqual(['p0', 'p1', 'p2', 'p3']);
  });
});
