// A sink removed from the config leaves nothing behind in the store's per-sink positions: when the
// source's poller starts (registerSinks, under the store lease), its position, parked ids,
// generation and lost-upstream record are dropped, with one log line naming the sink and what went.
import { Writable } from 'node:stream';
import { join } from 'node:path';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { Backlog } from '../../src/queue/local/backlog.js';
import { LocalProducer } from '../../src/queue/local/producer.js';
import { localPositionsAdmin } from '../../src/queue/local/positions-admin.js';
import { reportForgotten, type ProducerSink } from '../../src/queue/sink-positions.js';
import { CursorStore } from '../../src/store/cursors.js';
import { StoreLease } from '../../src/lease/store-lease.js';
import { openStore, type Db } from '../../src/store/store.js';
import { tempDir } from '../support/harness.js';

const noFilter = { sources: [], services: [], event_types: [], resource_types: [] };

function producer(db: Db, sinks: ProducerSink[], lines: Record<string, unknown>[] = []) {
  const logger = pino(
    { level: 'info' },
    new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
        done();
      },
    }),
  );
  const cursors = new CursorStore(db);
  return new LocalProducer(
    db,
    cursors,
    sinks,
    localPositionsAdmin(db, cursors, sinks),
    new Backlog(db),
    () => undefined,
    () => undefined,
    () => undefined,
    (source, f) => reportForgotten(logger, source, f),
  );
}

describe('sinks removed from the config', () => {
  it('lose their positions and records at start-up, with one log line each', async () => {
    const db = openStore(join(tempDir(), 'store.db'));
    try {
      expect(StoreLease.tryAcquire(db, { owner: 'me' })).toBeDefined();
      const at = { cursor: 40, seenAbove: [] };
      const file: ProducerSink = { name: 'file', filter: noFilter };
      const late: ProducerSink = { name: 'late', filter: noFilter, startFrom: 'earliest' };
      const quiet: ProducerSink = { name: 'quiet', filter: noFilter };
      // `late` is back-filled (its own position), `quiet` is live (a record only), on two sources.
      const before = producer(db, [file, late, quiet]);
      expect(await before.registerSinks('src', 'scheduling', at)).toEqual(['late']);
      expect(await before.registerSinks('other', 'workflow', at)).toEqual(['late']);
      db.prepare(`UPDATE known_sinks SET lost_count = 3 WHERE source = 'src' AND sink = 'late'`).run();

      // The config now lists `file` only.
      const lines: Record<string, unknown>[] = [];
      const after = producer(db, [file], lines);
      expect(await after.registerSinks('src', 'scheduling', at)).toEqual([]);
      const rows = (table: string) =>
        db.prepare(`SELECT source, sink FROM ${table} ORDER BY source, sink`).all() as {
          source: string;
          sink: string;
        }[];
      expect(rows('lagging_sinks')).toEqual([{ source: 'other', sink: 'late' }]);
      expect(rows('known_sinks')).toEqual([
        { source: 'other', sink: 'file' },
        { source: 'other', sink: 'late' },
        { source: 'other', sink: 'quiet' },
        { source: 'src', sink: 'file' },
      ]);
      expect(lines.map((l) => l.msg)).toEqual([
        'sink late is no longer configured: dropped its own position at event 0 (backfill) and its count of 3 events lost upstream on source src',
        'sink quiet is no longer configured: dropped its record (it was on the shared stream) on source src',
      ]);
      // Each source drops its own when its poller starts; nothing is left to drop after that.
      await after.registerSinks('other', 'workflow', at);
      expect(rows('lagging_sinks')).toEqual([]);
      expect(lines).toHaveLength(4);
      await after.registerSinks('src', 'scheduling', at);
      expect(lines).toHaveLength(4);
      expect(await localPositionsAdmin(db, new CursorStore(db), [file]).lost()).toEqual([]);
    } finally {
      db.close();
    }
  });
});
