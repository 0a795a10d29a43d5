// Queue counts (and sink positions) are read at scrape time. Several scrapers (or the several
// gauges of one scrape) must not each hit Redis, so one answer is shared for `ttlMs`; a failing
// read keeps the last good answer so the gauges stay meaningful while the queue is unreachable.
import type { SinkJobCounts } from '../queue/queue.js';
import { errorMessage } from '../core/errors.js';
import type { Logger } from './logger.js';
import { redactUrlCredentials } from './redact-text.js';

export type CountsProvider = () => Promise<Record<string, SinkJobCounts>>;

export interface ScrapeCache<T> {
  /** The latest answer, or the last good one when reading fails; undefined before any success. */
  get(): Promise<T | undefined>;
}

export type CountsCache = ScrapeCache<Record<string, SinkJobCounts>>;

export function createCountsCache(
  provider: CountsProvider,
  ttlMs: number,
  logger?: Logger,
  /** A hung Redis must not hang the scrape past Prometheus' own timeout. */
  timeoutMs = 2000,
  now: () => number = Date.now,
): CountsCache {
  return createScrapeCache(provider, { ttlMs, logger, timeoutMs, now, what: 'queue counts' });
}

export interface ScrapeCacheOptions {
  ttlMs: number;
  logger?: Logger;
  /** A hung Redis must not hang the scrape past Prometheus' own timeout (default 2 s). */
  timeoutMs?: number;
  now?: () => number;
  /** What is read, for the log lines ("queue counts", "sink positions"). */
  what: string;
}

export function createScrapeCache<T>(provider: () => Promise<T>, opts: ScrapeCacheOptions): ScrapeCache<T> {
  const { ttlMs, logger, what } = opts;
  const timeoutMs = opts.timeoutMs ?? 2000;
  const now = opts.now ?? Date.now;
  let last: T | undefined;
  let fetchedAt = -Infinity;
  let inFlight: Promise<T | undefined> | undefined;
  // Logged once per outage, not once per scrape.
  let failing = false;

  async function refresh(): Promise<T | undefined> {
    try {
      last = await withTimeout(provider(), timeoutMs);
      if (failing) logger?.info(`${what} readable again`);
      failing = false;
    } catch (err) {
      if (!failing) {
        logger?.warn(
          { err: redactUrlCredentials(errorMessage(err)) },
          `cannot read ${what} for metrics; keeping the last values`,
        );
      }
      failing = true;
    } finally {
      fetchedAt = now();
    }
    return last;
  }

  return {
    get() {
      if (inFlight) return inFlight;
      if (now() - fetchedAt < ttlMs) return Promise.resolve(last);
      inFlight = refresh().finally(() => {
        inFlight = undefined;
      });
      return inFlight;
    },
  };
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    timer.unref();
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
