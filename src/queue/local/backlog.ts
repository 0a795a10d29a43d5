import type { Db } from '../../store/store.js';

/**
 * Changes queued for a sink (bind the sink name twice): its `deliveries` rows plus the sizes of its
 * logged pages, which count whole until their last change is delivered — a slight overcount, never
 * under. Served by the (sink, id) index and the small page_log table.
 */
export const QUEUED_FOR_SINK = `SELECT (SELECT COUNT(*) FROM deliveries WHERE sink = ?) +
  (SELECT IFNULL(SUM(n), 0) FROM page_log WHERE sink = ?) AS n`;

/**
 * Undelivered deliveries per sink, kept in memory so the pollers' back-pressure check costs
 * nothing, and re-counted now and then because the `dlq` command may add rows from outside.
 */
export class Backlog {
  private readonly counts = new Map<string, number>();
  private readonly countStmt;

  constructor(
    db: Db,
    private readonly sinks: string[],
  ) {
    this.countStmt = db.prepare(QUEUED_FOR_SINK);
    this.recount();
  }

  recount(): void {
    for (const sink of this.sinks) this.counts.set(sink, (this.countStmt.get(sink, sink) as { n: number }).n);
  }

  add(sink: string, n: number): void {
    this.counts.set(sink, (this.counts.get(sink) ?? 0) + n);
  }

  of(sink: string): number {
    return this.counts.get(sink) ?? 0;
  }
}
