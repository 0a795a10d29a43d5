// One place that decides what a sink failure means and how long to wait, for both queue drivers.
import { backoffDelay } from '../backoff.js';
import { NeverError, RetryLaterError } from '../core/errors.js';
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

/**
 * After a retry-later failure: the attempts now spent and the wait before the next one. A receiver
 * that asks to wait (429 / Retry-After) is throttling, not failing: it gets the wait it asked for
 * (capped) and no attempt is spent, so a busy receiver never dead-letters changes.
 */
export function afterRetryableFailure(
  failure: ClassifiedFailure,
  attemptsMade: number,
  queue: Pick<QueueConfig, 'backoff_ms' | 'max_backoff_ms'>,
): { attempts: number; delayMs: number } {
  if (failure.retryAfterMs !== undefined)
    return {
      attempts: attemptsMade,
      delayMs: Math.max(1, Math.min(failure.retryAfterMs, queue.max_backoff_ms)),
    };
  const attempts = attemptsMade + 1;
  return { attempts, delayMs: Math.max(1, retryDelayMs(attempts, queue)) };
}
