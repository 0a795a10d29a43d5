import type { Change } from '../../core/change.js';
import { changeJson } from '../../core/change-json.js';
import { passesFilter, wantsSource } from '../../sinks/filter.js';
import type { CursorStore } from '../../store/cursors.js';
import type { Db } from '../../store/store.js';
import type {
  CatchUpCommit,
  CatchUpResult,
  ChangeQueue,
  FeedPosition,
  LaggingSink,
  PageCommit,
  SinkPositionsAdmin,
} from '../queue.js';
import type { Backlog } from './backlog.js';
import { LaggingSinkRows, type ForgottenSink } from './lagging-sinks.js';
import type { ProducerSink } from '../sink-positions.js';
import type { LoggedPage, QueuedRow } from './rows.js';

/** Rows a page queued, per sink name, in id order: handed to delivery from memory. */
export type QueuedSlices = Map<string, QueuedRow[]>;

/**
 * Whether a sink's delivery takes a page's changes straight into memory now, and which of them
 * (those it does not already hold queued); undefined: it does not, write them row by row.
 */
export type TakesPage = (sink: string, changes: Change[]) => Change[] | undefined;

/**
 * The embedded queue's producer: a page's deliveries and the new cursor are written in ONE SQLite
 * transaction, so the cursor can never run ahead of what is queued, whatever moment the process
 * dies at. The rows just written are then handed to delivery as they are (changes already built,
 * JSON already made), so the hot path never reads them back from the store.
 *
 * Two forms, same ids. When the sink's delivery takes the page into memory, the page's changes for
 * that sink are ONE `page_log` row (a JSON array of the change texts), their delivery ids reserved
 * in sqlite_sequence: one insert and one delete per page instead of one of each per change, and the
 * main cost of the local queue (docs/local-queue.md). Otherwise (a sink catching up from the store,
 * retrying, or no delivery in this process) each change is a `deliveries` row, as delivery reads them.
 */
export class LocalProducer implements ChangeQueue {
  private readonly insert;
  private readonly insertPage;
  private readonly lastId;
  private readonly reserveIds;
  private readonly commitTx;
  private readonly catchUpTx;
  private readonly registerTx;
  private readonly lagging;

  constructor(
    db: Db,
    private readonly cursors: CursorStore,
    private readonly sinks: ProducerSink[],
    private readonly positions: SinkPositionsAdmin,
    private readonly backlog: Backlog,
    private readonly onQueued: (slices: QueuedSlices) => void,
    private readonly takes: TakesPage = () => undefined,
    private readonly onParked: (source: string, sink: string) => void = () => undefined,
    private readonly onForgotten: (source: string, forgotten: ForgottenSink) => void = () => undefined,
  ) {
    this.insert = db.prepare(
      `INSERT OR IGNORE INTO deliveries (sink, key, subject_key, body) VALUES (?, ?, ?, ?)`,
    );
    this.insertPage = db.prepare('INSERT INTO page_log (id, sink, n, rows) VALUES (?, ?, ?, ?)');
    this.lastId = db.prepare(`SELECT seq FROM sqlite_sequence WHERE name = 'deliveries'`).pluck();
    this.reserveIds = reserveStatement(db);
    this.lagging = new LaggingSinkRows(db);
    this.commitTx = db.transaction((commit: PageCommit): { slices: QueuedSlices; parked: string[] } => {
      const slices: QueuedSlices = new Map();
      const parked: string[] = [];
      const lagging = new Map(this.lagging.list(commit.source).map((l) => [l.sink, l]));
      const from = commit.from ?? this.storedPosition(commit.source);
      // Sink by sink, so one sink's rows of a page get consecutive ids (acknowledged as a range).
      for (const sink of this.sinks) {
        const wanted = commit.changes.filter((change) => passesFilter(sink.filter, change));
        if (!wanted.length) {
          slices.set(sink.name, []);
          continue;
        }
        const lag = lagging.get(sink.name);
        if (!lag && this.backlog.of(sink.name) < (sink.maxBacklog ?? Infinity)) {
          slices.set(sink.name, this.queueFor(sink.name, wanted));
          continue;
        }
        // Parked (now, or already): the page is not queued for it; its catch-up reads it again.
        const kept = lag ? lag.pendingIds : 0;
        if (!lag) {
          this.lagging.leave(commit.source, sink.name, from, 'parked', Date.now());
          parked.push(sink.name);
        }
        this.lagging.pass(
          commit.source,
          sink.name,
          wanted.map((c) => c.event_id),
          kept,
        );
        slices.set(sink.name, []);
      }
      cursors.save(commit.source, commit.cursor, commit.seenAbove);
      return { slices, parked };
    });
    this.catchUpTx = db.transaction((commit: CatchUpCommit): { slices: QueuedSlices; lost: number[] } => {
      const sink = this.sinks.find((s) => s.name === commit.sink);
      const wanted = sink ? commit.changes.filter((change) => passesFilter(sink.filter, change)) : [];
      const lost = this.lagging.advance(commit);
      const slices: QueuedSlices = new Map();
      if (wanted.length) slices.set(commit.sink, this.queueFor(commit.sink, wanted));
      return { slices, lost };
    });
    this.registerTx = db.transaction((source: string, service: string, at: FeedPosition | undefined) => {
      const forgotten = this.lagging.forget(
        source,
        this.sinks.map((s) => s.name),
      );
      const added = this.lagging.register(
        source,
        this.sinks.filter((s) => wantsSource(s.filter, source, service)).map((s) => s.name),
      );
      const backfilled: string[] = [];
      for (const name of added) {
        const sink = this.sinks.find((s) => s.name === name)!;
        if (at === undefined || sink.startFrom === undefined) continue;
        const start = sink.startFrom === 'earliest' ? 0 : sink.startFrom;
        if (start >= at.cursor) continue;
        this.lagging.leave(source, name, { cursor: start, seenAbove: [] }, 'backfill', 0);
        backfilled.push(name);
      }
      return { backfilled, forgotten };
    });
  }

  /** The rows of `changes` for one sink: a logged page its delivery takes into memory, or rows. */
  private queueFor(sink: string, wanted: Change[]): QueuedRow[] {
    const taken = this.takes(sink, wanted);
    if (taken) {
      // Read here, not once per commit: a row-by-row sink earlier in this loop, or `dlq
      // retry` from another process, may have taken ids; and reserved at once, so that a
      // row-by-row sink later in this loop cannot take these.
      const firstId = ((this.lastId.get() as number | undefined) ?? 0) + 1;
      const rows = logPage(sink, taken, firstId);
      if (rows.length) {
        this.insertPage.run(firstId, sink, rows.length, `[${rows.map((r) => r.body).join(',')}]`);
        this.reserveIds(firstId + rows.length - 1);
      }
      return rows;
    }
    const rows: QueuedRow[] = [];
    for (const change of wanted) {
      const body = changeJson(change);
      const subjectKey = change.subject_url ?? change.key;
      const result = this.insert.run(sink, change.key, subjectKey, body);
      // Ignored: the key is already queued for this sink (a re-read after `cursor set`).
      if (result.changes === 0) continue;
      const id = Number(result.lastInsertRowid);
      rows.push({ id, key: change.key, subject_key: subjectKey, body, attempts: 0, available_at: 0, change });
    }
    return rows;
  }

  private storedPosition(source: string): FeedPosition {
    const stored = this.cursors.get(source);
    return stored ? { cursor: stored.eventId, seenAbove: stored.seenAbove } : { cursor: 0, seenAbove: [] };
  }

  async commitPage(commit: PageCommit): Promise<Record<string, number>> {
    // IMMEDIATE: the ids are read before the first write; no other writer may take them meanwhile.
    const { slices, parked } = this.commitTx.immediate(commit);
    for (const sink of parked) this.onParked(commit.source, sink);
    return this.handOver(slices);
  }

  async commitCatchUp(commit: CatchUpCommit): Promise<CatchUpResult> {
    const { slices, lost } = this.catchUpTx.immediate(commit);
    const counts = this.handOver(slices);
    return { queued: counts[commit.sink] ?? 0, lost };
  }

  async laggingSinks(source: string): Promise<LaggingSink[]> {
    return (await this.positions.lagging()).filter((l) => l.source === source);
  }

  async registerSinks(source: string, service: string, at: FeedPosition | undefined): Promise<string[]> {
    const { backfilled, forgotten } = this.registerTx.immediate(source, service, at);
    for (const f of forgotten) this.onForgotten(source, f);
    return backfilled;
  }

  private handOver(slices: QueuedSlices): Record<string, number> {
    const counts: Record<string, number> = {};
    for (const [sink, rows] of slices) counts[sink] = rows.length;
    this.onQueued(slices);
    return counts;
  }
}

/** The rows of one sink's page as a logged page with ids from `firstId` on. */
function logPage(sink: string, changes: Change[], firstId: number): QueuedRow[] {
  const page: LoggedPage = { id: firstId, sink, rows: [], remaining: changes.length };
  page.rows = changes.map((change, i) => ({
    id: firstId + i,
    key: change.key,
    subject_key: change.subject_url ?? change.key,
    body: changeJson(change),
    attempts: 0,
    available_at: 0,
    change,
    page,
  }));
  return page.rows;
}

/**
 * Records `lastId` as the deliveries table's AUTOINCREMENT high-water mark, so rows inserted
 * without an id (by `dlq retry`, possibly from another process) never take a logged page's ids.
 */
export function reserveStatement(db: Db): (lastId: number) => void {
  const update = db.prepare(`UPDATE sqlite_sequence SET seq = MAX(seq, ?) WHERE name = 'deliveries'`);
  const insert = db.prepare(`INSERT INTO sqlite_sequence (name, seq) VALUES ('deliveries', ?)`);
  return (lastId) => {
    if (update.run(lastId).changes === 0) insert.run(lastId);
  };
}
