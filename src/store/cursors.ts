import { pollStatusThrottle } from '../core/poll-status-throttle.js';
import type { Db } from './store.js';

export interface StoredCursor {
  eventId: number;
  seenAbove: number[];
}

export interface SourceStatus {
  source: string;
  cursor: number | null;
  lastPollAt: number | null;
  lastOkAt: number | null;
  lastEventAt: number | null;
  behind: boolean;
  lastError: string | null;
}

/** Cursors and per-source status rows. Statements are prepared once. */
export class CursorStore {
  private readonly statusWrites = pollStatusThrottle();
  private readonly getStmt;
  private readonly saveStmt;
  private readonly deleteStmt;
  private readonly statusStmt;

  constructor(private readonly db: Db) {
    this.getStmt = db.prepare('SELECT event_id, seen_above FROM cursors WHERE source = ?');
    this.saveStmt = db.prepare(
      `INSERT INTO cursors (source, event_id, seen_above, updated_at) VALUES (?, ?, ?, ?)
       ON CONFLICT (source) DO UPDATE SET event_id = excluded.event_id, seen_above = excluded.seen_above,
         updated_at = excluded.updated_at`,
    );
    this.deleteStmt = db.prepare('DELETE FROM cursors WHERE source = ?');
    this.statusStmt = db.prepare(
      `INSERT INTO source_status (source, last_poll_at, last_ok_at, last_event_at, behind, last_error)
       VALUES (@source, @now, CASE WHEN @ok THEN @now END, @lastEventAt, @behind, @error)
       ON CONFLICT (source) DO UPDATE SET last_poll_at = @now,
         last_ok_at = CASE WHEN @ok THEN @now ELSE last_ok_at END,
         last_event_at = COALESCE(@lastEventAt, last_event_at),
         behind = CASE WHEN @ok THEN @behind ELSE behind END,
         last_error = @error`,
    );
  }

  get(source: string): StoredCursor | undefined {
    const row = this.getStmt.get(source) as { event_id: number; seen_above: string } | undefined;
    if (!row) return undefined;
    return { eventId: row.event_id, seenAbove: JSON.parse(row.seen_above) as number[] };
  }

  save(source: string, eventId: number, seenAbove: number[]): void {
    this.saveStmt.run(source, eventId, JSON.stringify(seenAbove), Date.now());
  }

  delete(source: string): void {
    this.deleteStmt.run(source);
  }

  recordPoll(
    source: string,
    outcome: { ok: boolean; behind: boolean; lastEventAt?: number; error?: string },
  ): void {
    const now = Date.now();
    if (!this.statusWrites.due(source, outcome, now)) return;
    this.statusStmt.run({
      source,
      now,
      ok: outcome.ok ? 1 : 0,
      lastEventAt: outcome.lastEventAt ?? null,
      behind: outcome.behind ? 1 : 0,
      error: outcome.error ?? null,
    });
    this.statusWrites.written(source, outcome, now);
  }

  status(sources: string[]): SourceStatus[] {
    const rows = this.db
      .prepare(
        `SELECT s.source, c.event_id, s.last_poll_at, s.last_ok_at, s.last_event_at, s.behind, s.last_error
         FROM source_status s LEFT JOIN cursors c ON c.source = s.source`,
      )
      .all() as Record<string, number | string | null>[];
    const bySource = new Map(rows.map((r) => [r.source as string, r]));
    return sources.map((source) => {
      const r = bySource.get(source);
      const cursor = r?.event_id ?? this.get(source)?.eventId ?? null;
      return {
        source,
        cursor: cursor as number | null,
        lastPollAt: (r?.last_poll_at as number) ?? null,
        lastOkAt: (r?.last_ok_at as number) ?? null,
        lastEventAt: (r?.last_event_at as number) ?? null,
        behind: r?.behind === 1,
        lastError: (r?.last_error as string) ?? null,
      };
    });
  }
}
