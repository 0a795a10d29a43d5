// The local driver's one ownership rule: everything `run` writes to the store (page commits,
// cursors, delivery outcomes) and every sink delivery it starts happens under the store lease
// (src/lease/store-lease.ts). Pollers and delivery loops wait on the same acquisition; a second
// `run` on the store therefore waits as a whole, as a standby, and touches no row until it owns it.
import { StoreLease, type StoreLeaseOptions } from '../../lease/store-lease.js';
import type { Db } from '../../store/store.js';
import type { DeliveryFence } from '../../sinks/sink.js';

export class StoreOwnership {
  private lease: StoreLease | undefined;
  private acquiring: Promise<StoreLease | undefined> | undefined;
  private readonly waiters = new Set<(holder: string) => void>();
  private holderSeen: string | undefined;
  private readonly closing = new AbortController();
  private readonly lostController = new AbortController();
  /** Aborted (reason: the StoreLeaseLostError) once another process took the store over. */
  readonly lost: AbortSignal = this.lostController.signal;

  constructor(
    private readonly db: Db,
    private readonly opts: StoreLeaseOptions = {},
  ) {}

  /** Resolves once this process owns the store; undefined when `signal` aborts (or the driver closes) first. */
  async acquire(signal?: AbortSignal, onWait?: (holder: string) => void): Promise<StoreLease | undefined> {
    if (onWait) {
      if (this.holderSeen !== undefined) onWait(this.holderSeen);
      this.waiters.add(onWait);
    }
    this.acquiring ??= StoreLease.acquire(
      this.db,
      this.closing.signal,
      (holder) => {
        this.holderSeen = holder;
        for (const w of this.waiters) w(holder);
      },
      this.opts,
    ).then((lease) => {
      this.waiters.clear();
      if (!lease) return undefined;
      this.lease = lease;
      lease.lost.addEventListener('abort', () => this.lostController.abort(lease.lost.reason), {
        once: true,
      });
      return lease;
    });
    if (!signal) return this.acquiring;
    const aborted = new Promise<undefined>((resolve) => {
      if (signal.aborted) resolve(undefined);
      signal.addEventListener('abort', () => resolve(undefined), { once: true });
    });
    try {
      return await Promise.race([this.acquiring, aborted]);
    } finally {
      if (onWait) this.waiters.delete(onWait);
    }
  }

  /** Whether this process may act as the owner right now (see StoreLease.valid). */
  valid(): boolean {
    return this.lease?.valid() ?? false;
  }

  /**
   * After a sink call that ended while `valid()` was false (the process was frozen, or the store
   * too busy to renew): true once a renewal succeeds, false once the lease is found lost.
   */
  async confirm(): Promise<boolean> {
    while (!this.lost.aborted) {
      if (this.valid()) return true;
      await new Promise((r) => setTimeout(r, 20));
    }
    return false;
  }

  /** What a sink that can fence is handed with each delivery. */
  fence(): DeliveryFence | undefined {
    const lease = this.lease;
    return lease
      ? { scope: `store:${this.db.name}`, token: lease.token, valid: () => lease.valid() }
      : undefined;
  }

  /** The store's live owner (this process or another), or undefined. */
  holder(): string | undefined {
    return StoreLease.holder(this.db, this.opts.ttlMs);
  }

  /** Stops waiting and gives the store up (a standby takes it at its next try). */
  release(): void {
    this.closing.abort();
    this.lease?.release();
  }
}
