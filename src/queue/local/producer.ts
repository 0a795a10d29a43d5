import type { SinkFilter } from '../../config/types.js';
import { changeJson } from '../../core/change-json.js';
import { passesFilter } from '../../sinks/filter.js';
import type { CursorStore } from '../../store/cursors.js';
import type { Db } from '../../store/store.js';
import type { ChangeQueue, PageCommit } from '../queue.js';
import type { Backlog } from './backlog.js';
import type { QueuedRow } from './rows.js';

/** Rows a page queued, per sink name, in id order: handed to delivery from memory. */
export type QueuedSlices = Map<string, QueuedRow[]>;

/**
 * The embedded queue's producer: a page's deliveries (one row per change and sink that wants it)
 * and the new cursor are written in ONE SQLite transaction, so the cursor can never run ahead of
 * what is queued, whatever moment the process dies at. The rows just written are then handed to
 * delivery as they are (changes already built, JSON already made), so the hot path never reads
 * them back from the store.
 */
export class LocalProducer implements ChangeQueue {
  private readonly insert;
  private readonly commitTx;

  constructor(
    db: Db,
    cursors: CursorStore,
    private readonly sinks: { name: string; filter: SinkFilter }[],
    private readonly backlog: Backlog,
    private readonly onQueued: (slices: QueuedSlices) => void,
  ) {
    this.insert = db.prepare(
      `INSERT OR IGNORE INTO deliveries (sink, key, subject_key, body) VALUES (?, ?, ?, ?)`,
    );
    this.commitTx = db.transaction((commit: PageCommit): QueuedSlices => {
      const slices: QueuedSlices = new Map();
      // Sink by sink, so one sink's rows of a page get consecutive ids (acknowledged as a range).
      for (const sink of this.sinks) {
        const rows: QueuedRow[] = [];
        for (const change of commit.changes) {
          if (!passesFilter(sink.filter, change)) continue;
          const body = changeJson(change);
          const subjectKey = change.subject_url ?? change.key;
          const result = this.insert.run(sink.name, change.key, subjectKey, body);
          // Ignored: the key is already queued for this sink (a re-read after `cursor set`).
          if (result.changes === 0) continue;
          rows.push({
            id: Number(result.lastInsertRowid),
            key: change.key,
            subject_key: subjectKey,
            body,
            attempts: 0,
            available_at: 0,
            change,
          });
        }
        slices.set(sink.name, rows);
      }
      cursors.save(commit.source, commit.cursor, commit.seenAbove);
      return slices;
    });
  }

  async commitPage(commit: PageCommit): Promise<Record<string, number>> {
    const slices = this.commitTx(commit);
    const counts: Record<string, number> = {};
    for (const [sink, rows] of slices) {
      counts[sink] = rows.length;
      this.backlog.add(sink, rows.length);
    }
    this.onQueued(slices);
    return counts;
  }

  async maxBacklog(): Promise<number> {
    return this.backlog.max();
  }
}
