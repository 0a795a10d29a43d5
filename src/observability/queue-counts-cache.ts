// Queue counts are read at scrape time. Several scrapers (or the two queue gauges of one scrape)
// must not each hit Redis, so one answer is shared for `ttlMs`; a failing read keeps the last
// good answer so the gauges stay meaningful while the queue is unreachable.
import type { SinkJobCounts } from '../queue/queue.js';
import { errorMessage } from '../core/errors.js';
import type { Logger } from './logger.js';
import { redactUrlUserinfo } from './redact-text.js';

export type CountsProvider = () => Promise<Record<string, SinkJobCounts>>;

export interface CountsCache {
  /** The latest counts, or the last good ones when reading fails; undefined before any success. */
  get(): Promise<Record<string, SinkJobCounts> | undefined>;
}

export function createCountsCache(
  provider: CountsProvider,
  ttlMs: number,
  logger?: Logger,
  /** A hung Redis must not hang the scrape past Prometheus' own timeout. */
  timeoutMs = 2000,
  now: () => number = Date.now,
): CountsCache {
  let last: Record<string, SinkJobCounts> | undefined;
  let fetchedAt = -Infinity;
  let inFlight: Promise<Record<string, SinkJobCounts> | undefined> | undefined;
  // Logged once per outage, not once per scrape.
  let failing = false;

  async function refresh(): Promise<Record<string, SinkJobCounts> | undefined> {
    try {
      last = await withTimeout(provider(), timeoutMs);
      if (failing) logger?.info('queue counts readable again');
      failing = false;
    } catch (err) {
      if (!failing) {
        logger?.warn(
          { err: redactUrlUserinfo(errorMessage(err)) },
          'cannot read queue counts for metrics; keeping the last values',
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
