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
  /** Set while the row is stored only as part of its page's `page_log` row (not in `deliveries`). */
  page?: LoggedPage;
}

/** A page's rows for one sink, stored as one `page_log` row; deleted when `remaining` reaches 0. */
export interface LoggedPage {
  id: number;
  sink: string;
  rows: QueuedRow[];
  remaining: number;
}
