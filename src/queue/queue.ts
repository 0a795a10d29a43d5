import type { Change } from '../core/change.js';

/** What a poller hands over once per page: every change of the page and the cursor after it. */
export interface PageCommit {
  source: string;
  changes: Change[];
  /** The new cursor (the newer_than for the next request). */
  cursor: number;
  /** Event ids above `cursor` that this page already queued (workflow overlap, see services/workflow.ts). */
  seenAbove: number[];
}

export interface SinkJobCounts {
  waiting: number;
  active: number;
  delayed: number;
  /** Deliveries that failed and are waiting for their next attempt (local: same as delayed with attempts > 0). */
  failed: number;
  dead: number;
}

export interface DeadLetter {
  sink: string;
  key: string;
  change: Change;
  attempts: number;
  error: string;
  /** epoch ms */
  failedAt: number;
}

export interface DeadLetterFilter {
  sink?: string;
  key?: string;
}

/**
 * The producer side. The cursor invariant (docs/guarantees.md): after commitPage() resolves, every change of
 * the page is durably queued for every sink whose filter it passes AND the cursor is saved; if it
 * throws, the cursor did not move past anything that was not queued.
 */
export interface ChangeQueue {
  /** Resolves with the number of changes queued per sink name (sinks whose filter they passed). */
  commitPage(commit: PageCommit): Promise<Record<string, number>>;
  /** Largest undelivered backlog over all sinks: pollers pause above queue.max_backlog. */
  maxBacklog(): Promise<number>;
}

/** Operations shared by both drivers for `status` and `dlq`. */
export interface QueueAdmin {
  counts(): Promise<Record<string, SinkJobCounts>>;
  listDead(filter: DeadLetterFilter, limit?: number): Promise<DeadLetter[]>;
  /** Re-queue matching dead letters; returns how many. */
  retryDead(filter: DeadLetterFilter): Promise<number>;
  /** Delete matching dead letters; returns how many. */
  dropDead(filter: DeadLetterFilter): Promise<number>;
}

/** A sink as the delivery side sees it: its name, its filter (already applied by producers), the sink. */
export interface SinkRuntime {
  name: string;
  sink: import('../sinks/sink.js').Sink;
}

/** The consumer side: runs deliveries to sinks until stopped. */
export interface DeliveryRunner {
  start(): Promise<void>;
  /** Stop taking work, let in-flight deliveries finish (or hand them back) within timeoutMs. */
  stop(timeoutMs: number): Promise<void>;
}
