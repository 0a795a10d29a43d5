// Who owns a SQLite store: one lease, with a fencing token, checked inside every write.
//
// The local queue lives in one process per store (the pollers, the delivery loops and their rows),
// so the store has ONE owner: `run` takes the lease before it reads or moves any row, a second
// `run` on the same store waits as a standby, and `cursor set/reset` take it for as long as they
// run. The lease is a row (owner, token, heartbeat); each claim raises the token.
//
// The fence is inside the write, not before it: on claiming, the owner's connection gets TEMP
// triggers on every table of the store — all but the few UNFENCED_TABLES, each with its reason, so a
// table added later is fenced without anyone remembering to — that abort the statement (and so its
// transaction) unless the stored token is still its own. A process frozen past the TTL (SIGSTOP, a long GC
// pause, a throttled container) whose lease was taken meanwhile can therefore not write a single
// row when it resumes, whatever it was doing. TEMP triggers belong to the connection that created
// them, so other connections (status, dlq) are not fenced and need no token.
//
// The holder follows the lease rule (rule.ts): renewed at every heartbeat, and `valid()` turns
// false once its last renewal is older than SELF_EXPIRY of the TTL, before a standby may claim (a
// full TTL after the last heartbeat), so a resumed process starts no new sink delivery before it
// knows it still owns the store. Unlike a Redis lease, a stale store lease is not given up: a
// renewal that finds it still ours makes it valid again, and only one that finds it taken loses it.
import { sleep } from '../backoff.js';
import { FeedsyncError } from '../core/errors.js';
import type { Db } from '../store/store.js';
import { heartbeatMs, Holding, leaseOwner } from './rule.js';

export const STORE_LEASE_TTL_MS = 15_000;

/**
 * The only tables the owner's writes are not fenced on, and why. Every other table of the store is
 * (see fencedTables): a write the fence forgot lets a process frozen past its lease commit it.
 */
export const UNFENCED_TABLES: Readonly<Record<string, string>> = {
  store_lease: 'the lease itself: claims and renewals check the token in their own WHERE clause',
  sink_counts:
    'written only by the counting triggers of deliveries, page_log and dead_letters, after their own fence let the write through',
};
const OPERATIONS = ['INSERT', 'UPDATE', 'DELETE'] as const;
export const LEASE_LOST_MESSAGE = 'feedsync: this process no longer owns the store (lease taken over)';

/** Another process took the store while this one was not renewing its lease. */
export class StoreLeaseLostError extends FeedsyncError {
  override name = 'StoreLeaseLostError';
  constructor(path: string, holder: string | undefined) {
    super(
      `store ${path}: another process (${holder ?? 'unknown'}) took the store over while this one did not renew its lease ` +
        '(was it frozen or stopped longer than the lease?); this process stops writing',
      false,
    );
  }
}

interface LeaseRow {
  owner: string;
  token: number;
  heartbeat_at: number;
}

export interface StoreLeaseOptions {
  owner?: string;
  ttlMs?: number;
}

export class StoreLease {
  readonly lost: AbortSignal;
  private readonly holding: Holding;
  private timer: NodeJS.Timeout | undefined;
  private readonly renewal;

  private constructor(
    private readonly db: Db,
    readonly owner: string,
    readonly token: number,
    private readonly ttlMs: number,
    sentAt: number,
  ) {
    this.holding = new Holding(ttlMs, sentAt);
    this.lost = this.holding.lost;
    // Run at every heartbeat: prepared once.
    this.renewal = db.prepare(
      'UPDATE store_lease SET heartbeat_at = ? WHERE id = 1 AND owner = ? AND token = ?',
    );
    installFence(db, token);
    this.timer = setInterval(() => this.renew(), heartbeatMs(ttlMs));
    this.timer.unref();
  }

  /** The live owner of the store, or undefined. */
  static holder(db: Db, ttlMs = STORE_LEASE_TTL_MS): string | undefined {
    const row = readRow(db);
    return row && row.heartbeat_at >= Date.now() - ttlMs ? row.owner : undefined;
  }

  /** Claims the store if nobody holds it; undefined when a live owner does. */
  static tryAcquire(db: Db, opts: StoreLeaseOptions = {}): StoreLease | undefined {
    const owner = opts.owner ?? leaseOwner();
    const ttlMs = opts.ttlMs ?? STORE_LEASE_TTL_MS;
    const sentAt = performance.now();
    const token = db
      .transaction((): number | undefined => {
        const now = Date.now();
        const row = readRow(db);
        if (row && row.owner !== owner && row.heartbeat_at >= now - ttlMs) return undefined;
        const next = (row?.token ?? 0) + 1;
        db.prepare(
          `INSERT INTO store_lease (id, owner, token, heartbeat_at) VALUES (1, ?, ?, ?)
           ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, token = excluded.token, heartbeat_at = excluded.heartbeat_at`,
        ).run(owner, next, now);
        return next;
      })
      .immediate();
    return token === undefined ? undefined : new StoreLease(db, owner, token, ttlMs, sentAt);
  }

  /** Waits until the store is this process's (undefined if `signal` aborts first). */
  static async acquire(
    db: Db,
    signal: AbortSignal,
    onWait: (holder: string) => void,
    opts: StoreLeaseOptions = {},
  ): Promise<StoreLease | undefined> {
    let warned = false;
    for (;;) {
      let lease: StoreLease | undefined;
      try {
        lease = StoreLease.tryAcquire(db, opts);
      } catch (err) {
        // The owner is writing (SQLITE_BUSY): ask again later rather than block.
        if ((err as { code?: string }).code !== 'SQLITE_BUSY') throw err;
      }
      if (lease) return lease;
      if (!warned) onWait(StoreLease.holder(db, opts.ttlMs) ?? 'unknown');
      warned = true;
      if (!(await sleep(heartbeatMs(opts.ttlMs ?? STORE_LEASE_TTL_MS), signal))) return undefined;
    }
  }

  /** True while this process may act as the owner (rule.ts). */
  valid(): boolean {
    return this.holding.valid();
  }

  /** Gives the store up at once (a standby claims it at its next try). Idempotent. */
  release(): void {
    if (this.holding.released) return;
    this.holding.released = true;
    clearInterval(this.timer);
    if (!this.db.open) return;
    try {
      // Expired, not deleted: the next claim must still raise the token (a sink that fences
      // remembers the highest token it saw, and a claim starting again at 1 would be refused).
      this.db
        .prepare('UPDATE store_lease SET heartbeat_at = 0 WHERE id = 1 AND owner = ? AND token = ?')
        .run(this.owner, this.token);
      removeFence(this.db);
    } catch {
      // A busy or closed store: the lease then simply expires.
    }
  }

  private renew(): void {
    if (this.holding.released || this.lost.aborted || !this.db.open) return;
    const started = performance.now();
    try {
      const changes = this.renewal.run(Date.now(), this.owner, this.token).changes;
      if (changes === 1) {
        this.holding.renewed(started);
        return;
      }
    } catch (err) {
      // Busy: not renewed this time; valid() runs out by itself if it lasts.
      if ((err as { code?: string }).code === 'SQLITE_BUSY') return;
    }
    clearInterval(this.timer);
    this.holding.lose(new StoreLeaseLostError(this.db.name, StoreLease.holder(this.db, this.ttlMs)));
  }
}

function readRow(db: Db): LeaseRow | undefined {
  return db.prepare('SELECT owner, token, heartbeat_at FROM store_lease WHERE id = 1').get() as
    LeaseRow | undefined;
}

/** Every table of the store but UNFENCED_TABLES and SQLite's own (sqlite_sequence moves with `deliveries`). */
export function fencedTables(db: Db): string[] {
  const tables = db
    .prepare(
      `SELECT name FROM main.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'`,
    )
    .pluck()
    .all() as string[];
  return tables.filter((t) => !(t in UNFENCED_TABLES)).sort();
}

function installFence(db: Db, token: number): void {
  removeFence(db);
  for (const table of fencedTables(db))
    for (const op of OPERATIONS)
      db.exec(
        `CREATE TEMP TRIGGER "fence_${table}_${op.toLowerCase()}" BEFORE ${op} ON main."${table}"
         WHEN (SELECT token FROM main.store_lease WHERE id = 1) IS NOT ${Number(token)}
         BEGIN SELECT RAISE(ABORT, '${LEASE_LOST_MESSAGE}'); END`,
      );
}

function removeFence(db: Db): void {
  const triggers = db
    .prepare(
      `SELECT name FROM temp.sqlite_master WHERE type = 'trigger' AND name LIKE 'fence\\_%' ESCAPE '\\'`,
    )
    .pluck()
    .all() as string[];
  for (const name of triggers) db.exec(`DROP TRIGGER IF EXISTS temp."${name}"`);
}
