// What only the local driver has: its SQL (an index the delivery loop relies on) and its one-
// transaction page commit. The guarantees both drivers share are in test/queue/conformance.ts.
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { NEXT_RETRY_DUE } from '../../src/queue/local/delivery.js';
import { localPositionsAdmin } from '../../src/queue/local/positions-admin.js';
import { Backlog } from '../../src/queue/local/backlog.js';
import { LocalProducer } from '../../src/queue/local/producer.js';
import { CursorStore } from '../../src/store/cursors.js';
import { migrations } from '../../src/store/migrations.js';
import { openStore } from '../../src/store/store.js';
import { makeChange } from '../queue/support.js';
import { tempDir } from '../support/harness.js';

const noFilter = { sources: [], services: [], event_types: [], resource_types: [] };

describe('local queue', () => {
  it('finds the next retry through the partial index, not by scanning the backlog', async () => {
    const db = openStore(join(tempDir(), 'store.db'));
    onTestFinished(() => {
      db.close();
    });
    const plan = db.prepare(`EXPLAIN QUERY PLAN ${NEXT_RETRY_DUE}`).all('s', Date.now()) as {
      detail: string;
    }[];
    expect(plan.map((p) => p.detail).join('\n')).toMatch(/USING COVERING INDEX deliveries_retrying/);
  });

  it('writes a page and its cursor in one transaction: a failed insert moves nothing', async () => {
    const db = openStore(join(tempDir(), 'store.db'));
    onTestFinished(() => {
      db.close();
    });
    const cursors = new CursorStore(db);
    const backlog = new Backlog(db);
    const producer = new LocalProducer(
      db,
      cursors,
      [{ name: 's', filter: noFilter }],
      localPositionsAdmin(db, cursors, []),
      backlog,
      () => undefined,
    );
    const page = Array.from({ length: 5 }, (_, i) => makeChange(200 + i));
    db.exec(
      `CREATE TEMP TRIGGER boom BEFORE INSERT ON deliveries WHEN NEW.key = '${page[3]!.key}' BEGIN SELECT RAISE(ABORT, 'disk says no'); END`,
    );
    await expect(
      producer.commitPage({ source: 'src', changes: page, cursor: 99, seenAbove: [] }),
    ).rejects.toThrow(/disk says no/);
    expect(cursors.get('src')).toBeUndefined();
    expect((db.prepare('SELECT COUNT(*) AS n FROM deliveries').get() as { n: number }).n).toBe(0);
    db.exec('DROP TRIGGER boom');
    expect(await producer.commitPage({ source: 'src', changes: page, cursor: 99, seenAbove: [98] })).toEqual({
      s: 5,
    });
    expect(cursors.get('src')).toEqual({ eventId: 99, seenAbove: [98] });
    expect(backlog.of('s')).toBe(5);
  });

  it('refuses a store written by a newer feedsync, naming the schema versions', () => {
    const path = join(tempDir(), 'store.db');
    openStore(path).close();
    const newer = new Database(path);
    newer.pragma(`user_version = ${migrations.at(-1)!.version + 1}`);
    newer.close();
    expect(() => openStore(path)).toThrow(
      new RegExp(
        `written by a newer feedsync \\(store schema ${migrations.at(-1)!.version + 1}; this version knows up to ${migrations.at(-1)!.version}\\)`,
      ),
    );
  });
});
