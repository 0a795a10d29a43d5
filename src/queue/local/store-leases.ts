// The local driver's SourceLeases: a source is held by whoever owns the store (one `run` per
// store), so every lease here is a view of the store lease.
import { StoreLease } from '../../lease/store-lease.js';
import type { CursorStore } from '../../store/cursors.js';
import type { Db } from '../../store/store.js';
import type { HeldSource, SourceLeases } from '../driver.js';
import { LaggingSinkRows } from './lagging-sinks.js';
import type { StoreOwnership } from './ownership.js';

export function storeLeases(
  ownership: StoreOwnership,
  db: Db,
  cursors: CursorStore,
  ttlMs: number,
): SourceLeases {
  const lagging = new LaggingSinkRows(db);
  return {
    async acquire(_source, signal, onWait) {
      const lease = await ownership.acquire(signal, onWait);
      // Released with the store when the process stops, not per source.
      return lease && { lost: lease.lost, release: async () => undefined };
    },
    holder: async () => ownership.holder(),
    async hold(source): Promise<HeldSource | { holder: string }> {
      const lease = StoreLease.tryAcquire(db, { ttlMs });
      if (!lease) return { holder: ownership.holder() ?? 'unknown' };
      return {
        lost: lease.lost,
        release: async () => lease.release(),
        // The store's fence triggers refuse this write if a `run` took the store meanwhile. Sinks
        // lagging past a rewind follow it in the same transaction (LaggingSinkRows.followCursor).
        save: async (eventId, seenAbove) =>
          db.transaction(() => {
            cursors.save(source, eventId, seenAbove);
            lagging.followCursor(source, eventId);
          })(),
      };
    },
  };
}
