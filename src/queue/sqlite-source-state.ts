// Source state kept in the SQLite store: the local driver's (the bullmq driver keeps it in Redis).
// The store is synchronous; the seam is not.
import type { CursorStore } from '../store/cursors.js';
import type { PollOutcome, SourceState } from './driver.js';

export function sqliteSourceState(cursors: CursorStore): SourceState {
  return {
    get: async (source) => cursors.get(source),
    save: async (source, eventId, seenAbove) => cursors.save(source, eventId, seenAbove),
    recordPoll: async (source, outcome: PollOutcome) => cursors.recordPoll(source, outcome),
    status: async (sources) => cursors.status(sources),
  };
}
