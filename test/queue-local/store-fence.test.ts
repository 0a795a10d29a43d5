// The store fence (src/lease/store-lease.ts) covers every table of the store: a table is fenced
// unless UNFENCED_TABLES names it with a reason, so a table added by a later migration is fenced
// without anyone remembering to. Checked on a real store file: after another process claims the
// store, the superseded owner's connection can write no row of any fenced table.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  fencedTables,
  StoreLease,
  UNFENCED_TABLES,
  LEASE_LOST_MESSAGE,
} from '../../src/lease/store-lease.js';
import { openStore } from '../../src/store/store.js';
import { CursorStore } from '../../src/store/cursors.js';
import { Backlog } from '../../src/queue/local/backlog.js';
import { LocalProducer } from '../../src/queue/local/producer.js';
import { localPositionsAdmin } from '../../src/queue/local/positions-admin.js';
import type { ProducerSink } from '../../src/queue/sink-positions.js';
import { tempDir } from '../support/harness.js';

describe('the store fence', () => {
  it('covers every table of the schema but the listed ones, each listed with its reason', () => {
    const db = openStore(join(tempDir(), 'store.db'));
    try {
      const all = db
        .prepare(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'`)
        .pluck()
        .all() as string[];
      const fenced = fencedTables(db);
      for (const table of all)
        expect(fenced.includes(table) || (UNFENCED_TABLES[table]?.length ?? 0) > 20, table).toBe(true);
      // The tables per-sink positions write, once forgotten (a catch-up step queuing no row wrote only them).
      expect(fenced).toEqual(
        expect.arrayContaining(['lagging_sinks', 'parked_ids', 'known_sinks', 'deliveries']),
      );
      expect(Object.keys(UNFENCED_TABLES).sort()).toEqual(['sink_counts', 'store_lease']);
    } finally {
      db.close();
    }
  });

  it('refuses every write of a superseded owner to every fenced table, and installs nothing twice', () => {
    const path = join(tempDir(), 'store.db');
    const stale = openStore(path);
    const other = openStore(path);
    try {
      const first = StoreLease.tryAcquire(stale, { owner: 'a', ttlMs: 10 });
      expect(first).toBeDefined();
      // Claimed again on the same connection: the fence is replaced, not doubled.
      const triggers = () =>
        stale
          .prepare(`SELECT COUNT(*) FROM temp.sqlite_master WHERE type = 'trigger'`)
          .pluck()
          .get() as number;
      const once = triggers();
      expect(once).toBe(fencedTables(stale).length * 3);
      // Another process takes the store over once the lease has expired.
      other.prepare('UPDATE store_lease SET heartbeat_at = 0').run();
      expect(StoreLease.tryAcquire(other, { owner: 'b', ttlMs: 10 })).toBeDefined();
      // BEFORE triggers run ahead of the row's own constraints: any insert shows the fence.
      for (const table of fencedTables(stale))
        expect(() => stale.prepare(`INSERT INTO "${table}" DEFAULT VALUES`).run(), table).toThrow(
          LEASE_LOST_MESSAGE,
        );
      // The new owner writes; the superseded one can neither change nor add a row.
      other
        .prepare(
          `INSERT INTO lagging_sinks (source, sink, cursor, reason, since, generation) VALUES ('s', 'k', 1, 'parked', 0, 1)`,
        )
        .run();
      expect(() => stale.prepare(`UPDATE lagging_sinks SET cursor = 9`).run()).toThrow(LEASE_LOST_MESSAGE);
      expect(() =>
        stale.prepare(`INSERT INTO known_sinks (source, sink, generation) VALUES ('s', 'k', 1)`).run(),
      ).toThrow(LEASE_LOST_MESSAGE);
      expect(() =>
        stale.prepare(`INSERT INTO parked_ids (source, sink, id) VALUES ('s', 'k', 1)`).run(),
      ).toThrow(LEASE_LOST_MESSAGE);
      expect(other.prepare('SELECT cursor FROM lagging_sinks').pluck().get()).toBe(1);
    } finally {
      stale.close();
      other.close();
    }
  });

  it("refuses a superseded owner's catch-up step that queues no row (a filtered sink, no matching event)", async () => {
    const path = join(tempDir(), 'store.db');
    const stale = openStore(path);
    const other = openStore(path);
    try {
      expect(StoreLease.tryAcquire(stale, { owner: 'a', ttlMs: 10_000 })).toBeDefined();
      const sinks: ProducerSink[] = [
        {
          name: 'filtered',
          filter: { sources: [], services: [], event_types: ['title_created'], resource_types: [] },
          maxBacklog: 100,
          startFrom: 'earliest',
        },
      ];
      const cursors = new CursorStore(stale);
      const producer = new LocalProducer(
        stale,
        cursors,
        sinks,
        localPositionsAdmin(stale, cursors, sinks),
        new Backlog(stale),
        () => undefined,
      );
      // The sink is added to a source at event 40: back-filled from the start of the feed.
      expect(await producer.registerSinks('src', 'scheduling', { cursor: 40, seenAbove: [] })).toEqual([
        'filtered',
      ]);
      const [lag] = await producer.laggingSinks('src');
      expect(lag).toMatchObject({ sink: 'filtered', cursor: 0, reason: 'backfill' });

      // Frozen past its lease: another process takes the store over.
      other.prepare('UPDATE store_lease SET heartbeat_at = 0').run();
      expect(StoreLease.tryAcquire(other, { owner: 'b', ttlMs: 10_000 })).toBeDefined();
      // Its page (events 1-30, none of the sink's type, short: it would rejoin) must write nothing.
      await expect(
        producer.commitCatchUp({
          source: 'src',
          sink: 'filtered',
          generation: lag!.generation,
          reason: lag!.reason,
          since: lag!.since,
          changes: [],
          cursor: 30,
          seenAbove: [],
          eventIds: Array.from({ length: 30 }, (_, i) => i + 1),
          eventAt: 0,
          join: true,
          from: { cursor: 0, seenAbove: [] },
          shared: { cursor: 30, seenAbove: [] },
        }),
      ).rejects.toThrow(LEASE_LOST_MESSAGE);
      expect(other.prepare('SELECT sink, cursor FROM lagging_sinks').all()).toEqual([
        { sink: 'filtered', cursor: 0 },
      ]);
      expect(other.prepare('SELECT SUM(lost_count) FROM known_sinks').pluck().get()).toBe(0);
    } finally {
      stale.close();
      other.close();
    }
  });
});
