// One poller per source across replicas (docs/architecture.md, invariant 7): a Redis key with an expiry,
// renewed while held. Losing it (stolen, or Redis unreachable for longer than the TTL, after which
// another replica may have taken it) aborts `lost` so the poller stops before it double-polls.
import type { Redis } from 'ioredis';
import { pino, type Logger } from 'pino';
import { sleep } from '../../backoff.js';
import { FeedsyncError, errorMessage } from '../../core/errors.js';
import { sourceLockKey } from './names.js';
import { closeRedis, createRedisConnection } from './redis.js';

export interface SourceLockOptions {
  redisUrl: string;
  /** queue.prefix (without braces). */
  prefix: string;
  source: string;
  /** Identifies this process in logs and in `cursor` refusals, e.g. `host:pid`. */
  owner: string;
  ttlMs?: number;
  signal?: AbortSignal;
  logger: Logger;
  /** How often acquire retries while someone else holds the lock. */
  pollMs?: number;
}

export interface SourceLock {
  /** Aborts when the lock is no longer ours. */
  lost: AbortSignal;
  /** Delete the key if it is still ours; stops renewing. Idempotent. */
  release(): Promise<void>;
}

const DEFAULT_TTL_MS = 15_000;

// Compare-and-act: only the owner may extend or delete, so a replica that lost the lock (and
// whose key another replica now holds) cannot extend or delete the new owner's key.
const RENEW_SCRIPT = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end`;
const RELEASE_SCRIPT = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end`;

export async function acquireSourceLock(opts: SourceLockOptions): Promise<SourceLock> {
  const ttl = Math.max(300, opts.ttlMs ?? DEFAULT_TTL_MS);
  const pollMs = opts.pollMs ?? 1_000;
  const key = sourceLockKey(opts.prefix, opts.source);
  const logger = opts.logger.child({ source: opts.source });
  const client = createRedisConnection(opts.redisUrl, 'lock', opts.logger);
  let announcedHolder: string | undefined;
  try {
    // The lock connection does not queue commands while connecting: wait for it once, quietly.
    await waitReady(client, 5_000);
    for (;;) {
      if (opts.signal?.aborted) {
        throw new FeedsyncError(`gave up waiting for the lock of source ${opts.source}: aborted`, false);
      }
      try {
        const ok = await client.set(key, opts.owner, 'PX', ttl, 'NX');
        if (ok === 'OK') break;
        const holder = await client.get(key);
        if (holder !== null && holder !== announcedHolder) {
          announcedHolder = holder;
          logger.info({ holder }, `waiting for source ${opts.source} held by ${holder}`);
        }
      } catch (err) {
        logger.warn({ err: errorMessage(err) }, `cannot reach redis to lock source ${opts.source}; retrying`);
      }
      await sleep(pollMs, opts.signal);
    }
  } catch (err) {
    await closeRedis(client);
    throw err;
  }
  logger.info({ owner: opts.owner }, `acquired lock of source ${opts.source}`);
  return holdLock(client, key, opts.owner, ttl, logger);
}

function holdLock(client: Redis, key: string, owner: string, ttl: number, logger: Logger): SourceLock {
  const lost = new AbortController();
  let lastRenewed = Date.now();
  let released: Promise<void> | undefined;
  let renewing = false;

  const renew = async (): Promise<void> => {
    if (renewing || lost.signal.aborted) return;
    renewing = true;
    try {
      const result = await client.eval(RENEW_SCRIPT, 1, key, owner, String(ttl));
      if (Number(result) === 1) {
        lastRenewed = Date.now();
      } else {
        logger.error({ key }, 'source lock was taken by another process; stopping');
        lost.abort(new FeedsyncError(`lock ${key} is held by another process`, false));
      }
    } catch (err) {
      // Past the TTL the key may have expired and been taken: we can no longer claim to hold it.
      if (Date.now() - lastRenewed >= ttl) {
        logger.error({ key, err: errorMessage(err) }, 'cannot renew source lock for longer than its ttl');
        lost.abort(new FeedsyncError(`lock ${key} could not be renewed within ${ttl} ms`, true));
      } else {
        logger.warn({ key, err: errorMessage(err) }, 'cannot renew source lock; will retry');
      }
    } finally {
      renewing = false;
    }
  };
  const timer = setInterval(() => void renew(), Math.max(100, Math.floor(ttl / 3)));
  lost.signal.addEventListener('abort', () => clearInterval(timer), { once: true });

  function release(): Promise<void> {
    released ??= (async () => {
      clearInterval(timer);
      try {
        if (!lost.signal.aborted) await client.eval(RELEASE_SCRIPT, 1, key, owner);
      } catch (err) {
        // The key expires on its own after the TTL; the next owner just waits a little longer.
        logger.warn({ key, err: errorMessage(err) }, 'cannot release source lock; it will expire');
      } finally {
        await closeRedis(client);
      }
    })();
    return released;
  }

  return { lost: lost.signal, release };
}

/** Who holds the lock of `source`, or null; for `feedsync cursor`, which refuses while it is held. */
export async function readSourceLockOwner(
  redisUrl: string,
  prefix: string,
  source: string,
  logger?: Logger,
): Promise<string | null> {
  const client = createRedisConnection(redisUrl, 'admin', logger ?? pino({ level: 'silent' }));
  try {
    return await client.get(sourceLockKey(prefix, source));
  } finally {
    await closeRedis(client);
  }
}

function waitReady(client: Redis, timeoutMs: number): Promise<void> {
  if (client.status === 'ready') return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      client.off('ready', done);
      resolve();
    };
    const timer = setTimeout(done, timeoutMs);
    client.once('ready', done);
  });
}
