import type { Db } from '../../store/store.js';

/** One sink's counts as the store keeps them (migration 7): triggers move them with every row. */
export interface SinkCounts {
  /** Undelivered: its `deliveries` rows plus the sizes of its logged pages (whole until the last change is delivered). */
  queued: number;
  dead: number;
}

/**
 * What each sink has queued and dead-lettered, read from `sink_counts`: one row per sink, whatever
 * the backlog. The counts change in the statements that change the rows, so every reader (a page
 * commit's back-pressure check inside its transaction, a catch-up step, `status`, a scrape) sees
 * exactly what is stored, with nothing to re-count.
 */
export class Backlog {
  private readonly one;
  private readonly all;

  constructor(db: Db) {
    this.one = db.prepare('SELECT queued FROM sink_counts WHERE sink = ?').pluck();
    this.all = db.prepare('SELECT sink, queued, dead FROM sink_counts');
  }

  of(sink: string): number {
    return (this.one.get(sink) as number | undefined) ?? 0;
  }

  counts(): Map<string, SinkCounts> {
    const rows = this.all.all() as ({ sink: string } & SinkCounts)[];
    return new Map(rows.map((r) => [r.sink, { queued: r.queued, dead: r.dead }]));
  }
}
