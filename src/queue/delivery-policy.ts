// The one decision about a failed delivery, for every queue driver: dead-letter now, retry after a
// backoff (an attempt spent), or wait as the receiver asked (no attempt spent). Drivers only carry
// it out; docs/guarantees.md states the rules.
import { backoffDelay } from '../backoff.js';
import type { QueueConfig } from '../config/types.js';
import { NeverError, RetryLaterError } from '../core/errors.js';

type RetryConfig = Pick<QueueConfig, 'attempts' | 'backoff_ms' | 'max_backoff_ms'>;

export type DeliveryDecision =
  /** Bury the change: the sink refused it (NeverError) or the attempts are spent. */
  | { outcome: 'dead'; attempts: number; reason: string }
  /** Try again in `delayMs`; `attempts` is what is now spent on the change. */
  | { outcome: 'retry'; attempts: number; delayMs: number };

/**
 * After a failed attempt on a change that had `attemptsMade` attempts spent before it. NeverError
 * dead-letters at once; anything else is retried. A receiver that asks to wait (Retry-After) is
 * throttling, not failing: it gets the wait it asked for (capped by max_backoff_ms) and no attempt
 * is spent, so a busy receiver never dead-letters changes. Otherwise the wait is exponential with
 * full jitter, and reaching `queue.attempts` dead-letters.
 */
export function decideAfterFailure(err: unknown, attemptsMade: number, queue: RetryConfig): DeliveryDecision {
  if (err instanceof NeverError)
    return { outcome: 'dead', attempts: attemptsMade + 1, reason: 'sink refused the change' };
  const retryAfterMs = err instanceof RetryLaterError ? err.retryAfterMs : undefined;
  if (retryAfterMs !== undefined)
    return {
      outcome: 'retry',
      attempts: attemptsMade,
      delayMs: Math.max(1, Math.min(retryAfterMs, queue.max_backoff_ms)),
    };
  const attempts = attemptsMade + 1;
  if (attempts >= queue.attempts)
    return { outcome: 'dead', attempts, reason: `gave up after ${attempts} attempts` };
  return { outcome: 'retry', attempts, delayMs: Math.max(1, retryDelayMs(attempts, queue)) };
}

/** Delay before attempt number `attemptsMade + 1` (attemptsMade ≥ 1): exponential with full jitter. */
export function retryDelayMs(
  attemptsMade: number,
  queue: Pick<QueueConfig, 'backoff_ms' | 'max_backoff_ms'>,
): number {
  return backoffDelay(attemptsMade - 1, queue.backoff_ms, queue.max_backoff_ms);
}
