import type { Change } from '../../core/change.js';

/** One row of the `deliveries` table: one change queued for one sink. */
export interface QueuedRow {
  id: number;
  key: string;
  subject_key: string;
  /** The change's JSON, exactly as stored. */
  body: string;
  attempts: number;
  available_at: number;
  /** The change itself when it is already in memory (fresh from the producer, or parsed once). */
  change?: Change;
}
