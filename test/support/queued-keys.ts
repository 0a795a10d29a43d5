// What the local queue holds for a sink, read straight from its store: rows in `deliveries`, pages
// delivered from memory (one `page_log` row holding their changes) and dead letters.
import type Database from 'better-sqlite3';

export function queuedKeys(db: Database.Database, sink: string): Set<string> {
  const keys = new Set(
    (
      db
        .prepare(
          'SELECT key FROM deliveries WHERE sink = ? UNION SELECT key FROM dead_letters WHERE sink = ?',
        )
        .all(sink, sink) as { key: string }[]
    ).map((r) => r.key),
  );
  const pages = db.prepare('SELECT rows FROM page_log WHERE sink = ?').all(sink) as { rows: string }[];
  for (const page of pages)
    for (const change of JSON.parse(page.rows) as { key: string }[]) keys.add(change.key);
  return keys;
}
