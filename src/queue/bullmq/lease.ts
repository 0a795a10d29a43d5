// Source leases for scaled mode: any number of `poll` replicas, each source polled by one of them at
// a time. A lease is a Redis key `<token> <owner>` with an expiry (lease-scripts.ts), renewed every
// ttl/3 while held; the token comes from a per-source counter that only grows, so every acquisition
// has a token no earlier holder had. Page commits check it (page-commit.ts): a holder that was
// paused past its lease and resumes finds a newer token and writes nothing (fencing). How sources
// spread over the replicas is replicas.ts.
import { hostname } from 'node:os';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { sleep } from '../../backoff.js';
import { FeedsyncError, errorMessage } from '../../core/errors.js';
import type { HeldLease, SourceLeases } from '../driver.js';
import { leaseKey, leaseTokenKey, pollersKey, type Keys } from './names.js';
import { closeRedis, createRedisConnection, whenReady, type RedisEndpoint } from './redis.js';
import { warnRedisFailure } from './redis-monitor.js';
import { ACQUIRE, ownerOf, RELEASE, RENEW } from './lease-scripts.js';
import { handOverCandidate, Replicas } from './replicas.js';
import { holdSource } from './source-hold.js';
import { runScript } from './scripts.js';

export const DEFAULT_LEASE_TTL_MS = 15_000;

/** What a page commit checks to prove it still holds the source (see page-commit.ts). */
export interface LeaseFence {
  leaseKey: string;
  tokenKey: string;
  /** The lease key's value while held: `<token> <owner>`. */
  value: string;
  token: number;
}

export interface RedisSourceLeases extends SourceLeases {
  /** The held lease of `source`, or undefined when this replica does not hold it. */
  fence(source: string): LeaseFence | undefined;
  /** A commit found a newer token: the lease is gone, stop polling the source. */
  markLost(source: string, reason: string): void;
  /** Sources this replica holds now (for feedsync_source_leader). */
  held(): string[];
  close(): Promise<void>;
}

export interface RedisLeasesOptions {
  /** A URL, or the driver's endpoint (TLS settings, shared monitor). */
  redisUrl: string | RedisEndpoint;
  /** queue.prefix (without braces: one Redis), or where the keys are. */
  prefix: Keys;
  /** Every source the replicas share, for the fair share. */
  sources: string[];
  ttlMs?: number;
  /** Identifies this replica in logs, `status` and `cursor` refusals; default `host:pid`. */
  owner?: string;
  logger: Logger;
  /** A connection instead of one made from redisUrl; the caller keeps ownership. */
  connection?: Redis;
  /** queue.min_replicas_acked, for the fenced cursor save of `hold` (source-hold.ts). */
  minReplicasAcked?: number;
}

interface Held {
  fence: LeaseFence;
  lost: AbortController;
  since: number;
  lastRenewed: number;
  /** performance.now() when the last successful renewal was sent (Redis set the expiry after that). */
  renewedAt: number;
}

/**
 * A holder stops by its own monotonic clock this far into the TTL without a successful renewal, so
 * it has stopped before the key can expire and a standby take the source: a renewal that hangs (a
 * frozen Redis, a cut connection that never errors) or a process paused past it cannot leave two
 * pollers.
 */
export const SELF_EXPIRY = 0.8;

export function defaultOwner(): string {
  return `${hostname()}:${process.pid}`;
}

export function createRedisSourceLeases(opts: RedisLeasesOptions): RedisSourceLeases {
  const ttl = Math.max(1_000, opts.ttlMs ?? DEFAULT_LEASE_TTL_MS);
  const owner = opts.owner ?? defaultOwner();
  const logger = opts.logger;
  const ownConnection = !opts.connection;
  const client = opts.connection ?? createRedisConnection(opts.redisUrl, 'lock', logger);
  // Retried failures repeat at every beat and retry (several a second): logged through the
  // connection's monitor, once and then with a count, and named by kind (not "cannot reach" for a
  // refused permission).
  const warn = (err: unknown, fields: Record<string, unknown>, msg: string): void =>
    warnRedisFailure(client, logger, err, fields, msg);
  const replicas = new Replicas(client, pollersKey(opts.prefix), owner, ttl);
  // Standbys retry often enough that a takeover comes well within a second of the expiry.
  const retryMs = Math.min(1_000, Math.floor(ttl / 4));
  const held = new Map<string, Held>();
  let closed = false;
  let tick: Promise<void> | undefined;

  const share = (): number => replicas.share(opts.sources.length);

  async function renew(source: string, lease: Held): Promise<void> {
    const sent = performance.now();
    try {
      const ok = Number(
        await runScript(client, RENEW, [lease.fence.leaseKey], [lease.fence.value, String(ttl)]),
      );
      if (ok === 1) {
        lease.lastRenewed = Date.now();
        lease.renewedAt = sent;
      } else markLost(source, 'lease taken by another replica (or expired) before it was renewed');
    } catch (err) {
      // Past the TTL the key may have expired and been taken: we can no longer claim to hold it.
      if (Date.now() - lease.lastRenewed >= ttl)
        markLost(source, `cannot renew within ${ttl} ms: ${errorMessage(err)}`);
      else warn(err, { source }, 'cannot renew source lease; will retry');
    }
  }

  /** Over its share (a replica joined): let the longest-held lease go, at most one per beat. */
  function rebalance(): void {
    const source = handOverCandidate(held, share(), ttl);
    const lease = source === undefined ? undefined : held.get(source);
    if (!source || !lease) return;
    logger.info(
      { source, held: held.size, share: share(), replicas: replicas.live },
      `handing source ${source} over: this replica holds more than its share`,
    );
    lease.lost.abort(
      new FeedsyncError(`lease of ${source} handed over to spread sources across replicas`, true),
    );
  }

  async function beat(): Promise<void> {
    try {
      await replicas.beat();
    } catch (err) {
      warn(err, {}, 'cannot write the poller heartbeat to redis; will retry');
    }
    await Promise.all([...held].map(([source, lease]) => renew(source, lease)));
    rebalance();
  }

  /** Independent of the beat, which may hang on a frozen Redis: stop before the key can expire. */
  function expireStale(): void {
    const now = performance.now();
    for (const [source, lease] of held)
      if (now - lease.renewedAt >= ttl * SELF_EXPIRY)
        markLost(
          source,
          `not renewed for ${Math.round(now - lease.renewedAt)} ms (redis unreachable or frozen, or this process was paused); stopping before the lease can expire`,
        );
  }

  // Started by the first acquire: a process that only asks who holds what is not a replica.
  let timer: NodeJS.Timeout | undefined;
  let watchdog: NodeJS.Timeout | undefined;
  const startBeating = (): void => {
    watchdog ??= setInterval(expireStale, Math.max(50, Math.floor(ttl / 10)));
    timer ??= setInterval(
      () => {
        if (!tick) tick = beat().finally(() => (tick = undefined));
      },
      Math.max(100, Math.floor(ttl / 3)),
    );
  };

  function markLost(source: string, reason: string): void {
    const lease = held.get(source);
    if (!lease || lease.lost.signal.aborted) return;
    logger.error({ source, reason }, `lost the lease of source ${source}; its poller stops`);
    lease.lost.abort(new FeedsyncError(`lease of ${source} lost: ${reason}`, true));
  }

  async function tryAcquire(source: string): Promise<{ lease?: Held; holder?: string }> {
    await replicas.beat();
    if (held.size >= share()) return { holder: await holderOf(source) };
    const sent = performance.now();
    const reply = (await runScript(
      client,
      ACQUIRE,
      [leaseKey(opts.prefix, source), leaseTokenKey(opts.prefix, source)],
      [owner, String(ttl)],
    )) as [number, string | null];
    const token = Number(reply[0]);
    if (token === 0) return { holder: ownerOf(reply[1]) };
    const now = Date.now();
    return {
      lease: {
        fence: {
          leaseKey: leaseKey(opts.prefix, source),
          tokenKey: leaseTokenKey(opts.prefix, source),
          value: String(reply[1]),
          token,
        },
        lost: new AbortController(),
        since: now,
        lastRenewed: now,
        renewedAt: sent,
      },
    };
  }

  async function acquire(
    source: string,
    signal: AbortSignal,
    onWait: (holder: string) => void,
  ): Promise<HeldLease | undefined> {
    if (!opts.sources.includes(source))
      throw new FeedsyncError(`lease asked for unknown source ${source}`, false);
    let announced: string | undefined;
    startBeating();
    // The connection does not queue commands while connecting: wait for it once, quietly.
    await whenReady(client, 5_000);
    for (;;) {
      if (signal.aborted || closed) return undefined;
      if (held.has(source))
        throw new FeedsyncError(`source ${source} is already leased by this replica`, false);
      try {
        const { lease, holder } = await tryAcquire(source);
        if (lease) {
          held.set(source, lease);
          // The message is what operators (and the process tests) look for on a takeover.
          logger.info({ source, token: lease.fence.token, owner }, `acquired the lease of source ${source}`);
          return heldLease(source, lease);
        }
        const waitingFor = holder ?? '(none: this replica holds its share of sources)';
        if (waitingFor !== announced) {
          announced = waitingFor;
          onWait(waitingFor);
        }
      } catch (err) {
        warn(err, { source }, `cannot lease source ${source} in redis; retrying`);
      }
      if (!(await sleep(retryMs, signal))) return undefined;
    }
  }

  function heldLease(source: string, lease: Held): HeldLease {
    let released: Promise<void> | undefined;
    return {
      lost: lease.lost.signal,
      release: () =>
        (released ??= (async () => {
          if (held.get(source) === lease) held.delete(source);
          try {
            await runScript(client, RELEASE, [lease.fence.leaseKey], [lease.fence.value]);
          } catch (err) {
            // It expires on its own after the TTL; a standby just waits a little longer.
            logger.warn({ source, err: errorMessage(err) }, 'cannot release source lease; it will expire');
          }
        })()),
    };
  }

  async function holderOf(source: string): Promise<string | undefined> {
    return ownerOf(await client.get(leaseKey(opts.prefix, source)));
  }

  function fence(source: string): LeaseFence | undefined {
    expireStale();
    const lease = held.get(source);
    return lease && !lease.lost.signal.aborted ? lease.fence : undefined;
  }

  async function close(): Promise<void> {
    if (closed) return;
    closed = true;
    clearInterval(timer);
    clearInterval(watchdog);
    await tick;
    // Leases still held (a poller that did not stop) are released so a standby need not wait.
    await Promise.all(
      [...held.values()].map((lease) =>
        runScript(client, RELEASE, [lease.fence.leaseKey], [lease.fence.value]).catch(() => undefined),
      ),
    );
    held.clear();
    if (timer) await replicas.leave();
    if (ownConnection) await closeRedis(client);
  }

  return {
    acquire,
    holder: holderOf,
    hold: (source) =>
      holdSource(client, opts.prefix, source, ttl, `${owner} (cursor command)`, opts.minReplicasAcked),
    fence,
    markLost,
    held: () => [...held].filter(([, h]) => !h.lost.signal.aborted).map(([s]) => s),
    close,
  };
}

/** Who holds `source`'s lease, without joining the pollers (for `cursor` refusals and `status`). */
export async function readLeaseHolder(
  client: Redis,
  prefix: Keys,
  source: string,
): Promise<string | undefined> {
  return ownerOf(await client.get(leaseKey(prefix, source)));
}
