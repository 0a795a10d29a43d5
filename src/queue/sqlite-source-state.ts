// Source state and leases kept in the SQLite store: the local driver's (the bullmq driver keeps
// them in Redis). The store is synchronous; the seam is not.
import type { CursorStore } from '../store/cursors.js';
import type { SqliteSourceLocks } from '../store/source-lock.js';
import type { PollOutcome, SourceLeases, SourceState } from './driver.js';

export function sqliteSourceState(cursors: CursorStore): SourceState {
  return {
    get: async (source) => cursors.get(source),
    save: async (source, eventId, seenAbove) => cursors.save(source, eventId, seenAbove),
    recordPoll: async (source, outcome: PollOutcome) => cursors.recordPoll(source, outcome),
    status: async (sources) => cursors.status(sources),
  };
}

export function sqliteSourceLeases(locks: SqliteSourceLocks): SourceLeases {
  return {
    acquire: (source, signal, onWait) => locks.acquire(source, signal, onWait),
    holder: async (source) => locks.holder(source) ?? undefined,
  };
}
