import type { SinkFilter } from '../../config/types.js';
import { passesFilter } from '../../sinks/filter.js';
import type { CursorStore } from '../../store/cursors.js';
import type { Db } from '../../store/store.js';
import type { ChangeQueue, PageCommit } from '../queue.js';
import type { Backlog } from './backlog.js';

/**
 * The embedded queue's producer: a page's deliveries (one row per change and sink that wants it)
 * and the new cursor are written in ONE SQLite transaction, so the cursor can never run ahead of
 * what is queued, whatever moment the process dies at.
 */
export class LocalProducer implements ChangeQueue {
  private readonly insert;
  private readonly commitTx;

  constructor(
    db: Db,
    cursors: CursorStore,
    private readonly sinks: { name: string; filter: SinkFilter }[],
    private readonly backlog: Backlog,
    private readonly onQueued: () => void,
  ) {
    this.insert = db.prepare(
      `INSERT OR IGNORE INTO deliveries (sink, key, subject_key, body) VALUES (?, ?, ?, ?)`,
    );
    this.commitTx = db.transaction((commit: PageCommit) => {
      const counts: Record<string, number> = {};
      for (const sink of this.sinks) counts[sink.name] = 0;
      for (const change of commit.changes) {
        const body = JSON.stringify(change);
        for (const sink of this.sinks) {
          if (!passesFilter(sink.filter, change)) continue;
          const subjectKey = change.subject_url ?? change.key;
          counts[sink.name]! += this.insert.run(sink.name, change.key, subjectKey, body).changes;
        }
      }
      cursors.save(commit.source, commit.cursor, commit.seenAbove);
      return counts;
    });
  }

  async commitPage(commit: PageCommit): Promise<Record<string, number>> {
    const counts = this.commitTx(commit) as Record<string, number>;
    for (const [sink, n] of Object.entries(counts)) this.backlog.add(sink, n);
    this.onQueued();
    return counts;
  }

  async maxBacklog(): Promise<number> {
    return this.backlog.max();
  }
}
