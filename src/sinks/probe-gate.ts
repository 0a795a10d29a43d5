// A sink that keeps failing must not be flooded: left alone, every queued change retries on its
// own schedule, and with many lanes, shards and subjects a receiver answering 503 got ~210
// requests a second (issue #22). Once a few calls in a row have failed, the gate lets one call at
// a time through as a probe, spaced by the queue's backoff and never sooner than the sink's
// Retry-After, and turns every other call away without calling the sink (SinkProbingError: a
// wait, so the queues spend no attempt and dead-letter nothing). The first answer from the sink
// opens the gate again.
import type { Logger } from 'pino';
import { backoffDelay } from '../backoff.js';
import type { QueueConfig } from '../config/types.js';
import type { Change } from '../core/change.js';
import { errorMessage, NeverError, RetryLaterError, SinkProbingError } from '../core/errors.js';
import type { PipelineEvents } from '../core/events.js';
import type { DeliveryContext, Sink } from './sink.js';

export type SinkState = 'healthy' | 'failing';

export interface GatedSink extends Sink {
  state(): SinkState;
  /**
   * ms until the gate lets a call through (0: now). While a probe is in flight its outcome is not
   * known yet: then a short wait, so that the callers are back soon after it succeeds.
   */
  readyInMs(): number;
}

export interface ProbeGateHooks {
  logger: Logger;
  events?: PipelineEvents;
  /** Injected by tests; Date.now otherwise. */
  now?: () => number;
  random?: () => number;
}

/**
 * Failed calls in a row (no answer between them) that make a sink failing. One is not enough: a
 * receiver that refuses the odd request (a 502 from a proxy, a deadlock retried) would otherwise
 * stall the whole sink at every such error.
 */
export const FAILURES_TO_PROBE = 3;
/** Two requests a second at most to a failing sink, whatever the backoff and Retry-After say. */
export const MIN_PROBE_SPACING_MS = 500;
/** The longest wait between two probes of its own choosing (a Retry-After may ask for longer). */
export const MAX_PROBE_SPACING_MS = 60_000;
/** A call turned away comes back no sooner than this, so no queue spins on the gate. */
export const MIN_HOLD_MS = 100;

interface Failing {
  since: number;
  nextProbeAt: number;
  probing: boolean;
  probes: number;
  failedProbes: number;
  lastError: string;
}

type Backoff = Pick<QueueConfig, 'backoff_ms' | 'max_backoff_ms'>;

export function withProbeGate(sink: Sink, name: string, queue: Backoff, hooks: ProbeGateHooks): GatedSink {
  const now = hooks.now ?? Date.now;
  const random = hooks.random ?? Math.random;
  let failing: Failing | undefined;
  let failuresInARow = 0;

  // Capped as decideAfterFailure caps a change's wait: max_backoff_ms is the operator's longest wait.
  const asked = (err: unknown): number =>
    err instanceof RetryLaterError ? Math.min(err.retryAfterMs ?? 0, queue.max_backoff_ms) : 0;

  // Equal jitter rather than the queue's full jitter: processes probing one receiver drift apart,
  // yet each step stays at least half its nominal length, so a long outage is probed ever more rarely.
  // Never further apart than MAX_PROBE_SPACING_MS (unless the receiver asks): a sink back after a
  // long outage is noticed within a minute, not max_backoff_ms later.
  const longest = Math.max(MIN_PROBE_SPACING_MS, Math.min(queue.max_backoff_ms, MAX_PROBE_SPACING_MS));
  const spacingAfter = (failedProbes: number, err: unknown): number => {
    const ceiling = Math.min(longest, queue.backoff_ms * 2 ** Math.min(failedProbes, 30));
    const step = ceiling / 2 + backoffDelay(failedProbes, queue.backoff_ms, longest, random) / 2;
    return Math.ceil(Math.max(MIN_PROBE_SPACING_MS, asked(err), step));
  };

  // During a probe, not until the next one (which may be minutes away): a queue that cannot be
  // woken when the probe succeeds (a BullMQ shard waiting out its rate limit) is back within 500 ms.
  const holdMs = (f: Failing): number =>
    f.probing ? MIN_PROBE_SPACING_MS : Math.max(0, f.nextProbeAt - now());

  const answered = (): void => {
    failuresInARow = 0;
    const f = failing;
    if (!f) return;
    failing = undefined;
    hooks.events?.emit('sink:failing', { sink: name, failing: false });
    hooks.logger.info(
      { sink: name, failing_ms: now() - f.since, probes: f.probes },
      'sink answers again; delivering at full speed',
    );
  };

  const failed = (err: unknown): void => {
    const t = now();
    if (failing) {
      // A call let through before the sink started failing: only a longer Retry-After matters.
      failing.nextProbeAt = Math.max(failing.nextProbeAt, t + asked(err));
      return;
    }
    if (++failuresInARow < FAILURES_TO_PROBE) return;
    const spacing = spacingAfter(0, err);
    const lastError = errorMessage(err);
    failing = {
      since: t,
      nextProbeAt: t + spacing,
      probing: false,
      probes: 0,
      failedProbes: 0,
      lastError,
    };
    hooks.events?.emit('sink:failing', { sink: name, failing: true });
    // The sinks' own messages name no credential (the webhook's shows its URL without query or userinfo).
    hooks.logger.warn(
      { sink: name, err: lastError, next_probe_in_ms: spacing },
      'sink failing: its deliveries wait, one probe at a time until it answers',
    );
  };

  const probed = (f: Failing, ok: boolean, err?: unknown): void => {
    f.probing = false;
    hooks.events?.emit('sink:probe', { sink: name, ok });
    // Another answer opened the gate while this probe was out: it is an ordinary call now.
    if (failing !== f) {
      if (!ok) failed(err);
      return;
    }
    if (ok) return answered();
    f.failedProbes++;
    f.nextProbeAt = now() + spacingAfter(f.failedProbes, err);
    f.lastError = errorMessage(err);
  };

  const gate = <T>(start: () => Promise<T>): Promise<T> => {
    const f = failing;
    if (!f)
      return invoke(start).then(
        (value) => {
          // Any answer counts, even to a call sent before the failure: the sink is reachable.
          answered();
          return value;
        },
        (err: unknown) => {
          if (err instanceof NeverError) answered();
          else failed(err);
          throw err;
        },
      );
    const wait = holdMs(f);
    if (wait > 0)
      return Promise.reject(new SinkProbingError(name, Math.max(MIN_HOLD_MS, Math.ceil(wait)), f.lastError));
    f.probing = true;
    f.probes++;
    return invoke(start).then(
      (value) => {
        probed(f, true);
        return value;
      },
      (err: unknown) => {
        // A NeverError is an answer: the sink is back, this one change is bad.
        probed(f, err instanceof NeverError, err);
        throw err;
      },
    );
  };

  const out: GatedSink = {
    deliver: (change: Change, context?: DeliveryContext) => gate(() => sink.deliver(change, context)),
    close: () => sink.close(),
    state: () => (failing ? 'failing' : 'healthy'),
    readyInMs: () => (failing ? holdMs(failing) : 0),
  };
  if (sink.deliverBatch) {
    const batch = sink.deliverBatch.bind(sink);
    out.deliverBatch = (changes: Change[], context?: DeliveryContext) => gate(() => batch(changes, context));
  }
  if (sink.healthy) out.healthy = sink.healthy.bind(sink);
  return out;
}

/** A sink that throws synchronously (or returns a plain value) still settles a promise the gate sees. */
function invoke<T>(start: () => Promise<T>): Promise<T> {
  try {
    return Promise.resolve(start());
  } catch (err) {
    return Promise.reject(err);
  }
}
