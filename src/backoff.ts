// Retry timing shared by the upstream client, the poller and the queues, so every retry loop in
// the daemon spreads its load the same way and stops promptly on shutdown.

/**
 * Full-jitter exponential backoff: random in [0, min(maxMs, baseMs * 2^attempt)]. attempt starts at 0.
 * Full jitter (rather than "equal" or none) keeps many clients that failed together from retrying
 * together.
 */
export function backoffDelay(
  attempt: number,
  baseMs: number,
  maxMs: number,
  random: () => number = Math.random,
): number {
  const safeAttempt = Number.isFinite(attempt) && attempt > 0 ? Math.floor(attempt) : 0;
  const base = Math.max(0, baseMs);
  const max = Math.max(0, maxMs);
  // The exponent is clamped because 2^1024 is Infinity and 0 * Infinity is NaN; for large
  // exponents min() caps the (possibly infinite) product at maxMs.
  const ceiling = Math.min(max, base * 2 ** Math.min(safeAttempt, 1023));
  const r = random();
  const fraction = Number.isFinite(r) ? Math.min(Math.max(r, 0), 1) : 0;
  return Math.floor(ceiling * fraction);
}

/**
 * "Equal jitter": random in [ceiling/2, ceiling] of the same ceiling as backoffDelay. For loops that
 * promise to slow down (a source refused by its credentials, or stopped on a subject), where full
 * jitter's run of short draws would read as a busy loop.
 */
export function surelyGrowingDelay(
  attempt: number,
  baseMs: number,
  maxMs: number,
  random: () => number = Math.random,
): number {
  const ceiling = backoffDelay(attempt, baseMs, maxMs, () => 1);
  return Math.floor(ceiling / 2 + backoffDelay(attempt, baseMs, maxMs, random) / 2);
}

/**
 * Sleep that returns early when the signal aborts: resolves true after `ms`, false if aborted
 * (before or during the wait). Never rejects, so callers can write `if (!(await sleep(...))) return`.
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise<boolean>((resolve) => {
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(
      () => {
        signal?.removeEventListener('abort', onAbort);
        resolve(true);
      },
      Math.max(0, Number.isFinite(ms) ? ms : 0),
    );
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * `work`'s value, or undefined when it has not settled within `ms` (a rejection within it rejects).
 * The work keeps running: callers give up waiting for it, they do not cancel it.
 */
export async function withDeadline<T>(work: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

const DELTA_SECONDS = /^\d+$/;

/**
 * Parse Retry-After (delta-seconds or HTTP-date) to ms, capped at capMs; undefined when absent or
 * invalid. A date in the past means "now" (0). The cap protects us from a server (or proxy) asking
 * for an absurd pause that would stall a source for hours.
 */
export function parseRetryAfter(
  value: string | string[] | undefined,
  capMs: number,
  now: number = Date.now(),
): number | undefined {
  const raw = Array.isArray(value) ? value[0] : value;
  if (raw === undefined) return undefined;
  const text = raw.trim();
  if (text === '') return undefined;
  let ms: number;
  if (DELTA_SECONDS.test(text)) {
    ms = Number(text) * 1000;
  } else {
    // HTTP-date (IMF-fixdate, or the obsolete RFC 850/asctime forms Date.parse also accepts).
    // A bare number with sign or decimals is not valid delta-seconds and must not parse as a date.
    if (/^[+-]?\d+(\.\d+)?$/.test(text)) return undefined;
    const at = Date.parse(text);
    if (Number.isNaN(at)) return undefined;
    ms = at - now;
  }
  if (!Number.isFinite(ms)) return Math.max(0, capMs);
  return Math.min(Math.max(0, ms), Math.max(0, capMs));
}
