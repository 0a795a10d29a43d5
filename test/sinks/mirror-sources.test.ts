// Both mirror sinks with two sources writing the same subject URLs: rows are keyed by (source,
// subject_url), so one source's deletions and absurd positions never reach another's rows.
import Database from 'better-sqlite3';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Change } from '../../src/core/change.js';
import { openPostgresSink, postgresSinkSchema } from '../../src/sinks/postgres.js';
import type { Sink } from '../../src/sinks/sink.js';
import { openSqliteSink } from '../../src/sinks/sqlite-mirror.js';
import { startPostgres, type PostgresServer } from '../support/postgres.js';
import { BASE, makeChange, nextEventId, testContext } from './support/make-change.js';

let server: PostgresServer;
let admin: pg.Pool;
let root: string;

beforeAll(async () => {
  [server, root] = await Promise.all([startPostgres(), mkdtemp(join(tmpdir(), 'feedsync-mirror-src-'))]);
  admin = new pg.Pool({ connectionString: server.url, max: 2 });
  // An idle connection the server ends at the file's end is no failure of the test.
  admin.on('error', () => undefined);
});
afterAll(async () => {
  await admin?.end();
  server?.stop();
  await rm(root, { recursive: true, force: true });
});

const filter = { sources: [], services: [], event_types: [], resource_types: [] };

/** A row as both mirrors show it (ids as numbers, deleted as a boolean, the subject parsed). */
interface MirrorRow {
  source: string;
  subject_url: string;
  last_event_id: number;
  last_key: string;
  deleted: boolean;
  subject: Record<string, unknown> | null;
}

interface Mirror {
  open(): Promise<Sink>;
  /** Every row of `url`, by source. */
  rows(url: string): Promise<MirrorRow[]>;
}

function sqliteMirror(): Mirror {
  const path = join(root, `mirror-${nextEventId()}.db`);
  return {
    open: () => openSqliteSink({ name: 'sqlite', type: 'sqlite', path, filter }, testContext('sqlite', root)),
    rows: async (url) => {
      const db = new Database(path, { readonly: true });
      try {
        const rows = db
          .prepare(
            'SELECT source, subject_url, last_event_id, last_key, deleted, subject FROM subjects WHERE subject_url = ? ORDER BY source',
          )
          .all(url) as (Omit<MirrorRow, 'deleted' | 'subject'> & {
          deleted: number;
          subject: string | null;
        })[];
        return rows.map((r) => ({
          ...r,
          deleted: r.deleted === 1,
          subject: r.subject === null ? null : (JSON.parse(r.subject) as Record<string, unknown>),
        }));
      } finally {
        db.close();
      }
    },
  };
}

function postgresMirror(): Mirror {
  const schema = `src${nextEventId()}`;
  return {
    open: () =>
      openPostgresSink(
        postgresSinkSchema.parse({ name: 'postgres', type: 'postgres', url: server.url, schema }),
        testContext('postgres', root),
      ),
    rows: async (url) =>
      (
        await admin.query(
          `SELECT source, subject_url, last_event_id::float8 AS last_event_id, last_key, deleted, subject
           FROM ${schema}.subjects WHERE subject_url = $1 ORDER BY source`,
          [url],
        )
      ).rows as MirrorRow[],
  };
}

/** A change of source `source` about title `title`. */
function change(source: string, title: number, eventId: number, fields: Partial<Change> = {}): Change {
  // Built with a small id first: makeChange derives occurred_at from the id, out of range for 2^53.
  const built = makeChange({ source, subjectId: title, event_id: eventId % 1e9, ...fields });
  return { ...built, event_id: eventId, key: `${source}:${eventId}`, ...fields };
}

const MAX_SAFE = Number.MAX_SAFE_INTEGER; // 2^53 − 1

describe.each([
  ['sqlite', sqliteMirror],
  ['postgres', postgresMirror],
])('%s mirror with two sources on the same subject URLs', (_kind, make) => {
  it("keeps one row per source: A's deletion and A's huge ids leave B's rows alone, B's later changes apply", async () => {
    const mirror = make();
    const sink = await mirror.open();
    try {
      const [t1, t2, t3] = [nextEventId(), nextEventId(), nextEventId()];
      const url = (t: number) => `${BASE}/api/titles/${t}`;
      // B's titles as its feed lists them.
      for (const [i, t] of [t1, t2, t3].entries()) await sink.deliver(change('b', t, 10 + i));
      // A (hostile, or misconfigured with B's base URL) deletes B's first title and sends the other
      // two with positions no later event of B can pass: the largest safe id, and for a workflow
      // subject a year-9999 timestamp.
      await sink.deliver(
        change('a', t1, 20, {
          event_type: 'title_deleted',
          operation: 'deleted',
          subject_state: 'deleted',
          subject: null,
        }),
      );
      await sink.deliverBatch!([
        change('a', t2, MAX_SAFE, { subject: { resource_type: 'title', id: t2, name: 'forged by A' } }),
        change('a', t3, MAX_SAFE - 1, { subject_state: 'skipped', subject: null }),
      ]);
      // B's later changes, one alone and two in a batch.
      const later = [change('b', t1, 30), change('b', t2, 31), change('b', t3, 32)];
      await sink.deliver(later[0]!);
      await sink.deliverBatch!(later.slice(1));

      for (const [i, t] of [t1, t2, t3].entries()) {
        const rows = await mirror.rows(url(t));
        const b = rows.find((r) => r.source === 'b');
        expect(b, `B's row of title ${t}`).toMatchObject({
          last_event_id: 30 + i,
          last_key: `b:${30 + i}`,
          deleted: false,
          subject: later[i]!.subject,
        });
        // A's changes stay A's: its own rows beside B's.
        expect(rows.map((r) => r.source)).toEqual(['a', 'b']);
      }
      expect((await mirror.rows(url(t1)))[0]).toMatchObject({ source: 'a', deleted: true, last_key: 'a:20' });
      expect((await mirror.rows(url(t2)))[0]).toMatchObject({
        source: 'a',
        last_event_id: MAX_SAFE,
        subject: { name: 'forged by A' },
      });
    } finally {
      await sink.close();
    }
  });

  it("one batch holding both sources' changes of one URL writes each source's row", async () => {
    const mirror = make();
    const sink = await mirror.open();
    try {
      const t = nextEventId();
      await sink.deliverBatch!([change('a', t, 40), change('b', t, 7), change('a', t, 41)]);
      expect((await mirror.rows(`${BASE}/api/titles/${t}`)).map((r) => [r.source, r.last_event_id])).toEqual([
        ['a', 41],
        ['b', 7],
      ]);
    } finally {
      await sink.close();
    }
  });

  it("orders a workflow subject per source: A's year-9999 timestamp does not freeze B's row", async () => {
    const mirror = make();
    const sink = await mirror.open();
    try {
      const t = nextEventId();
      const wf = (source: string, eventId: number, occurred_at: string) =>
        change(source, t, eventId, { service: 'workflow', occurred_at });
      await sink.deliver(wf('b', 100, '2026-11-20T10:00:00.000Z'));
      await sink.deliver(wf('a', 5, '9999-12-31T23:59:59.000Z'));
      const later = wf('b', 101, '2026-11-20T10:00:01.000Z');
      await sink.deliver(later);
      const rows = await mirror.rows(`${BASE}/api/titles/${t}`);
      expect(rows.map((r) => [r.source, r.last_event_id])).toEqual([
        ['a', 5],
        ['b', 101],
      ]);
      // Within one source the rule is the contract's: an older position never overwrites a newer.
      await sink.deliver(wf('b', 102, '2026-11-20T09:59:59.000Z'));
      expect((await mirror.rows(`${BASE}/api/titles/${t}`))[1]).toMatchObject({ last_event_id: 101 });
    } finally {
      await sink.close();
    }
  });
});
