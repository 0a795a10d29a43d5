// One place that decides what a sink failure means and how long to wait, for both queue drivers.
import { backoffDelay } from '../backoff.js';
import { NeverError, RetryLaterError } from '../errors.js';
import type { QueueConfig } from '../config/types.js';

export type FailureKind = 'retry' | 'never';

export interface ClassifiedFailure {
  kind: FailureKind;
  /** Minimum wait asked for by the receiver (Retry-After). */
  retryAfterMs?: number;
}

/** NeverError dead-letters at once; RetryLaterError and anything unexpected are retried. */
export function classifyFailure(err: unknown): ClassifiedFailure {
  if (err instanceof NeverError) return { kind: 'never' };
  if (err instanceof RetryLaterError) return { kind: 'retry', retryAfterMs: err.retryAfterMs };
  return { kind: 'retry' };
}

/**
 * Delay before attempt number `attemptsMade + 1` (attemptsMade ≥ 1): exponential with full jitter,
 * but never shorter than what the receiver asked for.
 */
export function retryDelayMs(
  attemptsMade: number,
  queue: Pick<QueueConfig, 'backoff_ms' | 'max_backoff_ms'>,
  retryAfterMs?: number,
): number {
  const delay = backoffDelay(attemptsMade - 1, queue.backoff_ms, queue.max_backoff_ms);
  return Math.max(delay, Math.min(retryAfterMs ?? 0, queue.max_backoff_ms));
}
