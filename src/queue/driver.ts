// The driver seam: everything a process needs from a queue driver, behind one factory per driver.
// startDaemon and the operations commands compose these parts and never ask which driver they have;
// docs/architecture.md ("The driver seam") describes how a third driver plugs in.
import type { Logger } from 'pino';
import type { FeedsyncConfig } from '../config/types.js';
import type { PipelineEvents } from '../core/events.js';
import type { SourceStatus, StoredCursor } from '../store/cursors.js';

import type { ChangeQueue, DeliveryRunner, QueueAdmin, SinkPositionsAdmin, SinkRuntime } from './queue.js';

export type { SourceStatus, StoredCursor };

export interface HeldLease {
  /** Aborted when the lease could not be renewed (another process took it). */
  lost: AbortSignal;
  release(): Promise<void>;
}

/** What a process does: `ops` is the status / cursor / dlq commands, from outside the daemon. */
export type DriverMode = 'run' | 'poll' | 'work' | 'ops';

/** What one poll left behind, for `status` and /readyz. */
export interface PollOutcome {
  ok: boolean;
  behind: boolean;
  lastEventAt?: number;
  error?: string;
}

/** What a poller keeps between pages (the cursor is also written by ChangeQueue.commitPage). */
export interface SourceState {
  get(source: string): Promise<StoredCursor | undefined>;
  /** Outside a page commit: start_from latest, and `cursor set/reset`. */
  save(source: string, eventId: number, seenAbove: number[]): Promise<void>;
  recordPoll(source: string, outcome: PollOutcome): Promise<void>;
  status(sources: string[]): Promise<SourceStatus[]>;
}

/** One poller per source, across every process sharing the driver's state. */
export interface SourceLeases {
  /** Resolves when held (undefined if signal aborted first); `lost` aborts when the lease is lost. */
  acquire(
    source: string,
    signal: AbortSignal,
    onWait: (holder: string) => void,
  ): Promise<HeldLease | undefined>;
  /** The live holder, for `cursor set/reset` refusals and `status`. */
  holder(source: string): Promise<string | undefined>;
  /**
   * Takes the source for an operator command (`cursor set/reset`) at once, or returns its live
   * holder. Saving through the returned hold is fenced by it: a poller that took the source
   * meanwhile (the hold lost) makes the save fail instead of being overwritten.
   */
  hold(source: string): Promise<HeldSource | { holder: string }>;
}

/** A source held by an operator command. */
export interface HeldSource extends HeldLease {
  /** Writes the cursor, refused inside the write unless the hold is still this command's. */
  save(eventId: number, seenAbove: number[]): Promise<void>;
}

/** What one process needs from a queue driver; each driver's index.ts exports one factory. */
export interface QueueDriver {
  /** run/poll: commitPage writes the page AND the cursor in one atomic step. */
  producer?: ChangeQueue;
  /** run/poll/ops. */
  sourceState?: SourceState;
  /** run/poll/ops. */
  leases?: SourceLeases;
  /** run/work. */
  delivery?: DeliveryRunner;
  /** Counts and dead letters (status, dlq, metrics). */
  admin: QueueAdmin;
  /** Per-sink positions (status, metrics, replay). */
  positions: SinkPositionsAdmin;
  /** Aborted (reason: the error) when this process must stop: it no longer owns what it writes. */
  fatal?: AbortSignal;
  /** Readiness checks by name (store open, redis ping…). */
  checks: Record<string, () => boolean | Promise<boolean>>;
  /** Idempotent; releases everything the factory acquired (delivery is stopped by its owner first). */
  close(): Promise<void>;
}

export interface DriverContext {
  config: FeedsyncConfig;
  mode: DriverMode;
  /** Opened sinks; empty unless the mode delivers. */
  sinks: SinkRuntime[];
  events: PipelineEvents;
  logger: Logger;
}

export type DriverFactory = (ctx: DriverContext) => Promise<QueueDriver>;

export const modePolls = (mode: DriverMode): boolean => mode === 'run' || mode === 'poll';
export const modeDelivers = (mode: DriverMode): boolean => mode === 'run' || mode === 'work';
