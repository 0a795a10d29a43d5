// The one rule every lease of feedsync follows, whatever stores it (the SQLite store for `run`,
// Redis for scaled mode's pollers, shard consumers and operator commands):
//
// - a lease is taken with a fencing token above every token handed out before for it, and every
//   durable write of its holder checks that token inside its own transaction or script;
// - the holder renews it at every heartbeat (heartbeatMs: a quarter of the TTL, at most a second);
// - the holder judges by its own monotonic clock whether it may still act (`valid()`): only while
//   its last successful renewal was sent less than SELF_EXPIRY of the TTL ago, so a holder that
//   was paused or cut off stops before the lease can expire and another process take it.
//
// docs/guarantees.md, "Ownership", lists every owner, what it owns and where its token is checked.
import { hostname } from 'node:os';

/** This process as a lease holder, in logs, `status` and refusals: `host:pid`. */
export function leaseOwner(): string {
  return `${hostname()}:${process.pid}`;
}

/**
 * How far into the TTL without a successful renewal a holder stops acting. The margin (a fifth of
 * the TTL) covers the clock drift between the holder's monotonic clock and the store's expiry.
 */
export const SELF_EXPIRY = 0.8;

/** How often a holder renews (and a waiting process asks again): often enough that a takeover comes within a second of an expiry. */
export function heartbeatMs(ttlMs: number): number {
  return Math.max(25, Math.min(1_000, Math.floor(ttlMs / 4)));
}

/** The holder's side of one lease: when it was last renewed, whether it is lost, and `valid()`. */
export class Holding {
  /** performance.now() when the last successful renewal was sent (the store set the expiry after that). */
  private renewedAt: number;
  readonly since = performance.now();
  private readonly lostController = new AbortController();
  /** Aborted (reason: the error) once the lease is lost, handed over or released. */
  readonly lost: AbortSignal = this.lostController.signal;
  released = false;
  private handingOver = false;

  constructor(
    readonly ttlMs: number,
    /** performance.now() when the acquiring write was sent. */
    sentAt: number,
  ) {
    this.renewedAt = sentAt;
  }

  /** A renewal sent at `sentAt` succeeded. */
  renewed(sentAt: number): void {
    this.renewedAt = Math.max(this.renewedAt, sentAt);
  }

  /** Milliseconds since the last successful renewal was sent. */
  age(): number {
    return performance.now() - this.renewedAt;
  }

  /** Past SELF_EXPIRY of the TTL without a renewal. */
  stale(): boolean {
    return this.age() >= this.ttlMs * SELF_EXPIRY;
  }

  /** Whether the holder may still act: not released or lost, and renewed within SELF_EXPIRY of the TTL. */
  valid(): boolean {
    return !this.released && !this.lost.aborted && !this.stale();
  }

  /**
   * Handed over to spread the load (not lost): its holder stops as if it were lost, but the store
   * keeps it renewed until the holder releases it, so the next holder cannot start while this one
   * finishes what it has in flight (a sink call, a page). False when it was lost already.
   */
  handOver(reason: Error): boolean {
    if (this.lost.aborted) return false;
    this.handingOver = true;
    this.lostController.abort(reason);
    return true;
  }

  /** Handed over and still renewed: its holder is winding down (see handOver). */
  get handedOver(): boolean {
    return this.handingOver && !this.released;
  }

  /** To be renewed at the heartbeat: held, or handed over and not yet released. */
  renewable(): boolean {
    return !this.released && (!this.lost.aborted || this.handingOver);
  }

  /** Marks the lease lost (a handed-over one is no longer renewed either); false when it already was. */
  lose(reason: Error): boolean {
    this.handingOver = false;
    if (this.lost.aborted) return false;
    this.lostController.abort(reason);
    return true;
  }
}
