// The local store's side of per-sink positions (docs/sink-positions.md): the sinks off a source's
// shared stream, the ids the shared poll passed for a parked sink, and which sinks each source has
// seen (so a sink added later is back-filled once). Every method runs inside the caller's
// transaction: parking is decided in the page commit, a catch-up page and its new position are one
// commit, and a replay is one statement group — the store's single writer orders them all.
import type { Db } from '../../store/store.js';
import type { CatchUpCommit, FeedPosition, LaggingSink, LostUpstream } from '../queue.js';
import { CatchUpRefused, LOST_IDS_KEPT, MAX_PENDING_IDS, type LagReason } from '../sink-positions.js';

/** What a source kept for a sink that is no longer configured, dropped at start-up. */
export interface ForgottenSink {
  sink: string;
  /** Its own position, when it was off the shared stream. */
  position?: { cursor: number; reason: LagReason; pendingIds: number };
  lostUpstream: number;
}

type Row = {
  source: string;
  sink: string;
  cursor: number;
  seen_above: string;
  reason: LagReason;
  since: number;
  event_at: number;
  generation: number;
  ids: number;
  ids_truncated: number;
};

export class LaggingSinkRows {
  private readonly listStmt;
  private readonly listAllStmt;
  private readonly getStmt;
  private readonly upsertStmt;
  private readonly moveStmt;
  private readonly deleteStmt;
  private readonly insertId;
  private readonly deleteId;
  private readonly pendingStmt;
  private readonly dropIdsStmt;
  private readonly countIds;
  private readonly bumpStmt;
  private readonly knownStmt;
  private readonly lostStmt;
  private readonly rewindStmt;
  private readonly lostListStmt;
  private readonly keptSinksStmt;
  private readonly forgetStmts;

  constructor(db: Db) {
    this.listStmt = db.prepare('SELECT * FROM lagging_sinks WHERE source = ?');
    this.listAllStmt = db.prepare('SELECT * FROM lagging_sinks ORDER BY source, sink');
    this.getStmt = db.prepare('SELECT * FROM lagging_sinks WHERE source = ? AND sink = ?');
    this.upsertStmt = db.prepare(
      `INSERT INTO lagging_sinks (source, sink, cursor, seen_above, reason, since, event_at, generation, ids, ids_truncated)
       VALUES (@source, @sink, @cursor, @seen_above, @reason, @since, @event_at, @generation, @ids, 0)
       ON CONFLICT (source, sink) DO UPDATE SET cursor = excluded.cursor, seen_above = excluded.seen_above,
         reason = excluded.reason, since = excluded.since, event_at = excluded.event_at,
         generation = excluded.generation`,
    );
    this.moveStmt = db.prepare(
      `UPDATE lagging_sinks SET cursor = ?, seen_above = ?, event_at = MAX(event_at, ?), ids = MAX(0, ids - ?)
       WHERE source = ? AND sink = ?`,
    );
    this.deleteStmt = db.prepare('DELETE FROM lagging_sinks WHERE source = ? AND sink = ?');
    this.insertId = db.prepare('INSERT OR IGNORE INTO parked_ids (source, sink, id) VALUES (?, ?, ?)');
    this.deleteId = db.prepare('DELETE FROM parked_ids WHERE source = ? AND sink = ? AND id = ?');
    this.pendingStmt = db
      .prepare('SELECT id FROM parked_ids WHERE source = ? AND sink = ? ORDER BY id')
      .pluck();
    this.dropIdsStmt = db.prepare('DELETE FROM parked_ids WHERE source = ? AND sink = ?');
    this.countIds = db.prepare(
      'UPDATE lagging_sinks SET ids = ids + ?, ids_truncated = ids_truncated OR ? WHERE source = ? AND sink = ?',
    );
    this.bumpStmt = db.prepare(
      `INSERT INTO known_sinks (source, sink, generation) VALUES (?, ?, 1)
       ON CONFLICT (source, sink) DO UPDATE SET generation = generation + 1 RETURNING generation`,
    );
    this.lostStmt = db.prepare(
      'UPDATE known_sinks SET lost_count = lost_count + ?, lost_ids = ?, lost_at = ? WHERE source = ? AND sink = ?',
    );
    this.lostListStmt = db.prepare(
      'SELECT source, sink, lost_count, lost_ids, lost_at FROM known_sinks WHERE lost_count > 0 ORDER BY source, sink',
    );
    this.rewindStmt = db.prepare(
      `UPDATE lagging_sinks SET cursor = ?, seen_above = '[]' WHERE source = ? AND cursor > ?`,
    );
    this.knownStmt = db.prepare(
      'INSERT OR IGNORE INTO known_sinks (source, sink, generation) VALUES (?, ?, 0)',
    );
    this.keptSinksStmt = db
      .prepare(
        'SELECT sink FROM known_sinks WHERE source = ? UNION SELECT sink FROM lagging_sinks WHERE source = ?',
      )
      .pluck();
    this.forgetStmts = ['lagging_sinks', 'parked_ids', 'known_sinks'].map((table) =>
      db.prepare(`DELETE FROM ${table} WHERE source = ? AND sink = ?`),
    );
  }

  /**
   * Drops the positions, parked ids, generation and lost-upstream record that `source` keeps for
   * sinks not in `configured`: a removed sink's catch-up would read the feed for nobody, and its
   * rows would show in `status` for ever. A sink added again later under that name is new.
   */
  forget(source: string, configured: string[]): ForgottenSink[] {
    const gone = (this.keptSinksStmt.all(source, source) as string[]).filter((s) => !configured.includes(s));
    return gone.map((sink) => {
      const lag = this.get(source, sink);
      const lost = this.lost().find((l) => l.source === source && l.sink === sink)?.count ?? 0;
      for (const stmt of this.forgetStmts) stmt.run(source, sink);
      return {
        sink,
        ...(lag ? { position: { cursor: lag.cursor, reason: lag.reason, pendingIds: lag.pendingIds } } : {}),
        lostUpstream: lost,
      };
    });
  }

  /** The sinks of `source` off its shared stream (no backlog figure: the caller adds it). */
  list(source?: string): Omit<LaggingSink, 'backlog' | 'bound'>[] {
    const rows = (source === undefined ? this.listAllStmt.all() : this.listStmt.all(source)) as Row[];
    return rows.map(toLagging);
  }

  get(source: string, sink: string): Omit<LaggingSink, 'backlog' | 'bound'> | undefined {
    const row = this.getStmt.get(source, sink) as Row | undefined;
    return row && toLagging(row);
  }

  /** Takes `sink` off the shared stream of `source` at `at` (a new generation). */
  leave(source: string, sink: string, at: FeedPosition, reason: LagReason, eventAt: number): number {
    const generation = (this.bumpStmt.get(source, sink) as { generation: number }).generation;
    this.upsertStmt.run({
      source,
      sink,
      cursor: at.cursor,
      seen_above: JSON.stringify(at.seenAbove),
      reason,
      since: Date.now(),
      event_at: eventAt,
      generation,
      ids: 0,
    });
    return generation;
  }

  /** Records the ids the shared poll passed for a parked sink, up to MAX_PENDING_IDS. */
  pass(source: string, sink: string, ids: number[], kept: number): void {
    let added = 0;
    const room = Math.max(0, MAX_PENDING_IDS - kept);
    for (const id of ids.slice(0, room)) added += this.insertId.run(source, sink, id).changes;
    const truncated = ids.length > room ? 1 : 0;
    if (added || truncated) this.countIds.run(added, truncated, source, sink);
  }

  /** Applies one catch-up page's position; on join, the sink's row goes and the unseen ids come back. */
  advance(commit: CatchUpCommit): number[] {
    const row = this.get(commit.source, commit.sink);
    if (!row || row.generation !== commit.generation)
      throw new CatchUpRefused(commit.source, commit.sink, commit.generation, row?.generation);
    let seen = 0;
    for (const id of commit.eventIds) seen += this.deleteId.run(commit.source, commit.sink, id).changes;
    if (!commit.join) {
      this.moveStmt.run(
        commit.cursor,
        JSON.stringify(commit.seenAbove),
        commit.eventAt,
        seen,
        commit.source,
        commit.sink,
      );
      return [];
    }
    const lost = this.pendingStmt.all(commit.source, commit.sink) as number[];
    this.dropIdsStmt.run(commit.source, commit.sink);
    this.deleteStmt.run(commit.source, commit.sink);
    if (lost.length)
      this.lostStmt.run(
        lost.length,
        JSON.stringify(lost.slice(0, LOST_IDS_KEPT)),
        Date.now(),
        commit.source,
        commit.sink,
      );
    return lost;
  }

  /**
   * `cursor set/reset` moved the source's cursor back to `target`: every sink lagging past it goes
   * back to it too (it gets what the rewind re-delivers). A skip forward leaves lagging sinks where
   * they are: they never received what lies between, and nothing is skipped silently for them.
   */
  followCursor(source: string, target: number): void {
    this.rewindStmt.run(target, source, target);
  }

  /** Marks the sinks as seen for `source`; returns those never seen before. */
  register(source: string, sinks: string[]): string[] {
    return sinks.filter((sink) => this.knownStmt.run(source, sink).changes > 0);
  }

  lost(): LostUpstream[] {
    const rows = this.lostListStmt.all() as {
      source: string;
      sink: string;
      lost_count: number;
      lost_ids: string;
      lost_at: number;
    }[];
    return rows.map((r) => ({
      source: r.source,
      sink: r.sink,
      count: r.lost_count,
      ids: JSON.parse(r.lost_ids) as number[],
      at: r.lost_at,
    }));
  }
}

function toLagging(row: Row): Omit<LaggingSink, 'backlog' | 'bound'> {
  return {
    source: row.source,
    sink: row.sink,
    cursor: row.cursor,
    seenAbove: JSON.parse(row.seen_above) as number[],
    reason: row.reason,
    since: row.since,
    eventAt: row.event_at,
    generation: row.generation,
    pendingIds: row.ids,
    idsTruncated: row.ids_truncated !== 0,
  };
}
