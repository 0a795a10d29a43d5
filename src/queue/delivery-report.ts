// How every queue driver reports a delivery's outcome: one event per sink call for the metrics, one
// log line per failure. Keeping it here keeps the drivers' numbers and messages identical.
import type { Logger } from 'pino';
import type { Change } from '../core/change.js';
import { errorMessage, SinkProbingError } from '../core/errors.js';
import type { PipelineEvents } from '../core/events.js';
import type { DeliveryDecision } from './delivery-policy.js';

/** Seconds from the event to its delivery; undefined when occurred_at does not parse. */
export function endToEndSeconds(change: Change, now = Date.now()): number | undefined {
  const occurredAt = Date.parse(change.occurred_at);
  return Number.isFinite(occurredAt) ? Math.max(0, (now - occurredAt) / 1000) : undefined;
}

/** The sink took these changes in one call that lasted `durationSeconds`. */
export function reportDelivered(
  events: PipelineEvents,
  sink: string,
  changes: readonly Change[],
  durationSeconds: number,
): void {
  const now = Date.now();
  events.emit('delivery:finished', {
    sink,
    outcome: 'ok',
    durationSeconds,
    changes: changes.map((change) => ({ key: change.key, endToEndSeconds: endToEndSeconds(change, now) })),
  });
}

/** A failed attempt on `key` and what decideAfterFailure made of it. */
export function reportFailed(
  ctx: { events: PipelineEvents; logger: Logger; sink: string },
  key: string,
  decision: DeliveryDecision,
  err: unknown,
  durationSeconds: number,
): void {
  // Held back by the probe gate, the sink was never called: no attempt to count or log per change
  // (the gate logs the start and end of the failure and counts its probes).
  if (err instanceof SinkProbingError) return;
  ctx.events.emit('delivery:finished', {
    sink: ctx.sink,
    outcome: decision.outcome,
    durationSeconds,
    changes: [{ key }],
    error: err,
  });
  if (decision.outcome === 'dead')
    ctx.logger.error(
      { sink: ctx.sink, key, attempts: decision.attempts, err: errorMessage(err) },
      `delivery dead-lettered: ${decision.reason}`,
    );
  else
    ctx.logger.warn(
      {
        sink: ctx.sink,
        key,
        attempts: decision.attempts,
        retry_in_ms: Math.round(decision.delayMs),
        err: errorMessage(err),
      },
      'delivery failed; will retry',
    );
}
