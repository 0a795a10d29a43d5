// One poller per source on a single host: a lease row in the store, renewed while held. A process
// killed with -9 stops renewing, and the next one takes over once the lease has expired.
import { hostname } from 'node:os';
import { sleep } from '../backoff.js';
import type { Db } from './store.js';

export interface HeldLock {
  /** Aborted when the lease could not be renewed (another process took it). */
  lost: AbortSignal;
  release(): Promise<void>;
}

export const LOCK_TTL_MS = 15_000;

export function lockOwner(): string {
  return `${hostname()}:${process.pid}`;
}

export class SqliteSourceLocks {
  private readonly claimStmt;
  private readonly renewStmt;
  private readonly releaseStmt;
  private readonly holderStmt;

  constructor(
    db: Db,
    private readonly owner = lockOwner(),
    private readonly ttlMs = LOCK_TTL_MS,
  ) {
    // Claim when free, expired, or already ours; the WHERE makes it a compare-and-set.
    this.claimStmt = db.prepare(
      `INSERT INTO source_locks (source, owner, heartbeat_at) VALUES (@source, @owner, @now)
       ON CONFLICT (source) DO UPDATE SET owner = @owner, heartbeat_at = @now
       WHERE source_locks.owner = @owner OR source_locks.heartbeat_at < @expired`,
    );
    this.renewStmt = db.prepare(
      'UPDATE source_locks SET heartbeat_at = @now WHERE source = @source AND owner = @owner',
    );
    this.releaseStmt = db.prepare('DELETE FROM source_locks WHERE source = ? AND owner = ?');
    this.holderStmt = db.prepare('SELECT owner, heartbeat_at FROM source_locks WHERE source = ?');
  }

  /** Who holds the source now (a live lease), or null. */
  holder(source: string): string | null {
    const row = this.holderStmt.get(source) as { owner: string; heartbeat_at: number } | undefined;
    if (!row || row.heartbeat_at < Date.now() - this.ttlMs) return null;
    return row.owner;
  }

  tryAcquire(source: string): boolean {
    const now = Date.now();
    return this.claimStmt.run({ source, owner: this.owner, now, expired: now - this.ttlMs }).changes === 1;
  }

  /** Wait until the lease is ours (or signal aborts: returns undefined). */
  async acquire(
    source: string,
    signal: AbortSignal,
    onWait?: (holder: string) => void,
  ): Promise<HeldLock | undefined> {
    let warned = false;
    while (!this.tryAcquire(source)) {
      if (!warned) onWait?.(this.holder(source) ?? 'unknown');
      warned = true;
      if (!(await sleep(1000, signal))) return undefined;
    }
    const lost = new AbortController();
    const timer = setInterval(() => {
      try {
        if (this.renewStmt.run({ source, owner: this.owner, now: Date.now() }).changes !== 1) lost.abort();
      } catch {
        lost.abort();
      }
    }, this.ttlMs / 3);
    timer.unref();
    let released = false;
    return {
      lost: lost.signal,
      release: async () => {
        if (released) return;
        released = true;
        clearInterval(timer);
        this.releaseStmt.run(source, this.owner);
      },
    };
  }
}
