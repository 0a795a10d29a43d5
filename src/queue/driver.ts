// The driver seam: what one process needs from a queue driver, whichever it is. Each driver's
// factory returns a QueueDriver; the daemon and the operations commands use only this shape.
import type { Logger } from 'pino';
import type { FeedsyncConfig } from '../config/types.js';
import type { PipelineEvents } from '../core/events.js';
import type { SourceStatus, StoredCursor } from '../store/cursors.js';
import type { HeldLock } from '../store/source-lock.js';
import type { ChangeQueue, DeliveryRunner, QueueAdmin, SinkRuntime } from './queue.js';

export type { HeldLock, SourceStatus, StoredCursor };

/** What a poll ended with, for `status` and /readyz. */
export interface PollOutcome {
  ok: boolean;
  behind: boolean;
  lastEventAt?: number;
  error?: string;
}

/** What one process needs from a queue driver; each driver's index.ts exports one factory. */
export interface QueueDriver {
  /** run/poll: commitPage writes the page AND the cursor (one atomic step). */
  producer?: ChangeQueue;
  /** run/poll/ops: what a poller keeps between pages. */
  sourceState?: SourceState;
  /** run/poll/ops: one poller per source. */
  leases?: SourceLeases;
  /** run/work. */
  delivery?: DeliveryRunner;
  /** Counts and dead letters (status, dlq, metrics). */
  admin: QueueAdmin;
  /** Readiness (store open, redis ping…). */
  checks: Record<string, () => boolean | Promise<boolean>>;
  /** Idempotent; releases everything the factory acquired. */
  close(): Promise<void>;
}

export interface SourceState {
  get(source: string): Promise<StoredCursor | undefined>;
  /** start_from, cursor set/reset. */
  save(source: string, eventId: number, seenAbove: number[]): Promise<void>;
  /** status/readyz info. */
  recordPoll(source: string, outcome: PollOutcome): Promise<void>;
  status(sources: string[]): Promise<SourceStatus[]>;
}

export interface SourceLeases {
  /** Resolves when held (undefined if signal aborted first); `lost` aborts when the lease is lost. */
  acquire(
    source: string,
    signal: AbortSignal,
    onWait: (holder: string) => void,
  ): Promise<HeldLock | undefined>;
  /** For `cursor set/reset` refusals and `status`. */
  holder(source: string): Promise<string | undefined>;
}

export type DriverMode = 'run' | 'poll' | 'work' | 'ops';

export type DriverFactory = (ctx: {
  config: FeedsyncConfig;
  mode: DriverMode;
  /** Opened sinks (empty unless the mode delivers). */
  sinks: SinkRuntime[];
  events: PipelineEvents;
  logger: Logger;
}) => Promise<QueueDriver>;
