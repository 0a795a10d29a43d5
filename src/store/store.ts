import Database from 'better-sqlite3';
import { accessSync, constants, mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { FeedsyncError } from '../core/errors.js';
import { migrations } from './migrations.js';

export type Db = Database.Database;

/** The store could not be opened or written: a clear, non-retryable start-up error. */
export class StoreError extends FeedsyncError {
  override name = 'StoreError';
  constructor(path: string, detail: string) {
    super(`store ${path}: ${detail}`, false);
  }
}

/**
 * Open (creating if needed) the SQLite store in WAL mode and bring its schema up to date.
 * synchronous=NORMAL: a commit survives a process crash (kill -9); on power loss the last commits
 * may roll back together with the cursor they carry, which re-reads events rather than losing them.
 */
export function openStore(path: string, opts: { busyTimeoutMs?: number } = {}): Db {
  const abs = resolve(path);
  let db: Db;
  try {
    mkdirSync(dirname(abs), { recursive: true });
    accessSync(dirname(abs), constants.W_OK);
    // Migrations wait as long as it takes another opener to finish; see busyTimeoutMs below.
    db = new Database(abs, { timeout: 5000 });
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.pragma('foreign_keys = ON');
    migrate(db);
    // better-sqlite3 waits for a lock by blocking the thread: the daemon's event loop (/healthz,
    // the sinks, the pollers) would stop for that long. The daemon asks for a short wait and
    // retries a busy write itself, asynchronously.
    if (opts.busyTimeoutMs !== undefined)
      db.pragma(`busy_timeout = ${Math.max(0, Math.floor(opts.busyTimeoutMs))}`);
  } catch (err) {
    if (err instanceof StoreError) {
      db!.close();
      throw err;
    }
    throw new StoreError(abs, `cannot open or write (${(err as Error).message})`);
  }
  return db;
}

/**
 * Apply pending migrations in one IMMEDIATE transaction: the write lock is taken first (waiting up
 * to the busy timeout while the daemon writes), so concurrent openers (the daemon and the `status`
 * / `dlq` / `cursor` commands) neither fail with "database is locked" on a read-to-write upgrade
 * nor run a migration twice. It always commits one real write (user_version), so a full or
 * read-only disk fails here, naming the store, rather than later inside a running poller.
 */
function migrate(db: Db): void {
  db.transaction(() => {
    let version = db.pragma('user_version', { simple: true }) as number;
    const known = migrations.at(-1)!.version;
    // A newer feedsync's store may hold what this version cannot see (schema 4's logged pages):
    // running on it could leave changes undelivered.
    if (version > known)
      throw new StoreError(
        db.name,
        `written by a newer feedsync (store schema ${version}; this version knows up to ${known}): upgrade feedsync, or stop the newer one cleanly and use a fresh store`,
      );
    for (const m of migrations) {
      if (m.version <= version) continue;
      db.exec(m.sql);
      version = m.version;
    }
    db.pragma(`user_version = ${version}`);
  }).immediate();
}
