import type { Change } from '../../core/change.js';
import { Backlog } from './backlog.js';
import { FeedsyncError } from '../../core/errors.js';
import type { Db } from '../../store/store.js';
import type { DeadLetter, DeadLetterFilter, QueueAdmin, SinkJobCounts } from '../queue.js';

function where(filter: DeadLetterFilter, sinkNames: string[]): { sql: string; args: string[] } {
  if (filter.sink !== undefined && !sinkNames.includes(filter.sink))
    throw new FeedsyncError(
      `unknown sink "${filter.sink}" (configured: ${sinkNames.join(', ') || 'none'})`,
      false,
    );
  const parts: string[] = [];
  const args: string[] = [];
  if (filter.sink) {
    parts.push('sink = ?');
    args.push(filter.sink);
  }
  if (filter.key) {
    parts.push('key = ?');
    args.push(filter.key);
  }
  return { sql: parts.length ? `WHERE ${parts.join(' AND ')}` : '', args };
}

/** status and dlq for the embedded queue; safe to use from another process (the CLI). */
/** Dead letters handled per transaction (and per page in memory) by `dlq retry`. */
const DEAD_PAGE = 500;

export class LocalAdmin implements QueueAdmin {
  constructor(
    private readonly db: Db,
    private readonly sinkNames: string[],
    /** In-process: the ids currently being delivered (active); absent from the CLI. */
    private readonly inFlight: () => Map<string, number> = () => new Map(),
  ) {}

  async counts(): Promise<Record<string, SinkJobCounts>> {
    const now = Date.now();
    // Totals are the store's counts (one row per sink); only the few rows with a retry time are
    // read, through the partial index. A row has attempts > 0 only after a failure, which always
    // sets available_at, so "failed" is counted among them exactly. `status` and a scrape cost the
    // same on any backlog.
    const totals = new Backlog(this.db).counts();
    const retrying = this.db
      .prepare(
        `SELECT sink, SUM(available_at > ?) AS delayed, SUM(attempts > 0) AS failed
         FROM deliveries WHERE available_at > 0 GROUP BY sink`,
      )
      .all(now) as { sink: string; delayed: number; failed: number }[];
    const active = this.inFlight();
    const out: Record<string, SinkJobCounts> = {};
    for (const sink of this.sinkNames) {
      const r = retrying.find((x) => x.sink === sink);
      const delayed = r?.delayed ?? 0;
      const total = totals.get(sink);
      const ready = (total?.queued ?? 0) - delayed;
      const a = active.get(sink) ?? 0;
      out[sink] = {
        waiting: Math.max(0, ready - a),
        active: a,
        delayed,
        failed: r?.failed ?? 0,
        dead: total?.dead ?? 0,
      };
    }
    return out;
  }

  async listDead(filter: DeadLetterFilter, limit = 100): Promise<DeadLetter[]> {
    const w = where(filter, this.sinkNames);
    const rows = this.db
      .prepare(
        `SELECT sink, key, body, attempts, error, failed_at FROM dead_letters ${w.sql} ORDER BY id LIMIT ?`,
      )
      .all(...w.args, limit) as {
      sink: string;
      key: string;
      body: string;
      attempts: number;
      error: string;
      failed_at: number;
    }[];
    return rows.map((r) => ({
      sink: r.sink,
      key: r.key,
      change: JSON.parse(r.body) as Change,
      attempts: r.attempts,
      error: r.error,
      failedAt: r.failed_at,
    }));
  }

  /**
   * Moves matching dead letters back to the queue, DEAD_PAGE at a time: memory stays bounded
   * however many there are, and a running daemon waits for at most one short transaction.
   */
  async retryDead(filter: DeadLetterFilter): Promise<number> {
    const w = where(filter, this.sinkNames);
    const select = this.db.prepare(
      `SELECT id, sink, key, body FROM dead_letters ${w.sql} ORDER BY id LIMIT ?`,
    );
    const insert = this.db.prepare(
      'INSERT OR IGNORE INTO deliveries (sink, key, subject_key, body) VALUES (?, ?, ?, ?)',
    );
    const remove = this.db.prepare('DELETE FROM dead_letters WHERE id = ?');
    // IMMEDIATE: this transaction reads before it writes, and a running daemon commits all the
    // time; a deferred one would then fail to upgrade (SQLITE_BUSY) instead of waiting its turn.
    const movePage = this.db.transaction((): number => {
      const rows = select.all(...w.args, DEAD_PAGE) as {
        id: number;
        sink: string;
        key: string;
        body: string;
      }[];
      for (const r of rows) {
        const change = JSON.parse(r.body) as Change;
        insert.run(r.sink, r.key, change.subject_url ?? change.key, r.body);
        remove.run(r.id);
      }
      return rows.length;
    });
    let moved = 0;
    for (;;) {
      const n = movePage.immediate();
      moved += n;
      if (n < DEAD_PAGE) return moved;
    }
  }

  async dropDead(filter: DeadLetterFilter): Promise<number> {
    const w = where(filter, this.sinkNames);
    return this.db.prepare(`DELETE FROM dead_letters ${w.sql}`).run(...w.args).changes;
  }
}
