// Readiness and liveness. Readiness answers "should traffic/alerts consider this replica
// working": its store and queue are reachable and no source is failing every poll. Liveness
// only answers "is the event loop turning", so a Redis or upstream outage never gets the
// process restarted by Kubernetes (that would not fix the outage and would lose progress).
import type { PipelineEvents } from '../core/events.js';
import { cut } from '../core/bounded-text.js';
import { errorMessage, UndecodableSubjectError } from '../core/errors.js';
import { redactUrlCredentials } from './redact-text.js';

/** A failure as /readyz shows it: cut (it may quote upstream text), then scrubbed. */
const shown = (err: unknown) => redactUrlCredentials(cut(errorMessage(err), 1024));

export interface ReadinessStatus {
  ready: boolean;
  reasons: string[];
}

export interface Readiness {
  status(): Promise<ReadinessStatus>;
  /** Unsubscribes from the events. */
  close(): void;
}

export type ReadinessCheck = () => Promise<boolean> | boolean;

export interface ReadinessOptions {
  events: PipelineEvents;
  sources: { name: string; pollIntervalMs: number }[];
  /** Named checks, e.g. `store` (SQLite open), `redis` (PING); false or a throw means not ready. */
  checks: Record<string, ReadinessCheck>;
  /** Consecutive failed polls that make a source unready. */
  failedPollsThreshold?: number;
  /** A check that has not answered by then counts as failed (a hung Redis must not hang /readyz). */
  checkTimeoutMs?: number;
}

export const DEFAULT_FAILED_POLLS_THRESHOLD = 5;

export function createReadiness(opts: ReadinessOptions): Readiness {
  const threshold = opts.failedPollsThreshold ?? DEFAULT_FAILED_POLLS_THRESHOLD;
  const checkTimeoutMs = opts.checkTimeoutMs ?? 2000;
  const intervals = new Map(opts.sources.map((s) => [s.name, s.pollIntervalMs]));
  const consecutiveFailures = new Map<string, { count: number; lastError: string; stopped: boolean }>();

  const off = opts.events.on('poll:finished', (e) => {
    if (e.ok) {
      consecutiveFailures.delete(e.source);
      return;
    }
    const previous = consecutiveFailures.get(e.source);
    // A source stopped on an undecodable subject stays stopped until the operator acts: no need to
    // wait for more failed polls (which it retries slowly) to say so.
    const stopped = e.error instanceof UndecodableSubjectError;
    consecutiveFailures.set(e.source, {
      count: (previous?.count ?? 0) + 1,
      lastError: e.error === undefined ? 'unknown error' : shown(e.error),
      stopped,
    });
  });

  return {
    async status() {
      const reasons: string[] = [];
      const results = await Promise.all(
        Object.entries(opts.checks).map(async ([name, check]) => runCheck(name, check, checkTimeoutMs)),
      );
      for (const failure of results) if (failure) reasons.push(failure);
      for (const [source, failures] of consecutiveFailures) {
        if (failures.stopped) {
          reasons.push(`source "${source}" is stopped: ${failures.lastError}`);
          continue;
        }
        if (failures.count < threshold) continue;
        const interval = intervals.get(source);
        const every = interval === undefined ? '' : ` (poll interval ${interval} ms)`;
        reasons.push(
          `source "${source}" failed its last ${failures.count} polls${every}; last error: ${failures.lastError}`,
        );
      }
      return { ready: reasons.length === 0, reasons };
    },
    close: off,
  };
}

/** Returns a reason when the check fails, undefined when it passes. */
async function runCheck(name: string, check: ReadinessCheck, timeoutMs: number): Promise<string | undefined> {
  let timer: NodeJS.Timeout | undefined;
  try {
    const timeout = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), timeoutMs);
      timer.unref();
    });
    const result = await Promise.race([Promise.resolve().then(check), timeout]);
    if (result === 'timeout') return `check "${name}" did not answer within ${timeoutMs} ms`;
    return result === true ? undefined : `check "${name}" failed`;
  } catch (err) {
    return `check "${name}" failed: ${shown(err)}`;
  } finally {
    clearTimeout(timer);
  }
}

export interface Liveness {
  /** True while the event loop ticked recently. */
  alive(): boolean;
  /** Stops the ticker. */
  close(): void;
}

export interface LivenessOptions {
  tickMs?: number;
  /** Not alive once the last tick is this old. */
  staleAfterMs?: number;
}

export function createLiveness(opts: LivenessOptions = {}): Liveness {
  const tickMs = opts.tickMs ?? 500;
  const staleAfterMs = opts.staleAfterMs ?? 5000;
  let lastTick = Date.now();
  // A timer callback can only run when the loop is free, so its timestamp measures responsiveness.
  const ticker = setInterval(() => {
    lastTick = Date.now();
  }, tickMs);
  ticker.unref();
  return {
    alive: () => Date.now() - lastTick < staleAfterMs,
    close: () => clearInterval(ticker),
  };
}
