// Source leases for scaled mode: any number of `poll` replicas, each source polled by one of them at
// a time, each holding the source's lease (src/lease: a Redis key `<token> <owner>` with an expiry,
// under the one lease rule); the token only grows, so every acquisition has a token no earlier
// holder had. Page commits check it (page-commit.ts): a holder that was
// paused past its lease and resumes finds a newer token and writes nothing (fencing). How sources
// spread over the replicas is leases.ts.
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { FeedsyncError } from '../../core/errors.js';
import type { SourceLeases } from '../driver.js';
import { leaseKey, leaseTokenKey, pollersKey, type Keys } from './names.js';
import { closeRedis, createRedisConnection, type RedisEndpoint } from './redis.js';
import { ownerOf } from '../../lease/redis-scripts.js';
import { leaseOwner } from '../../lease/rule.js';
import { RedisLeases, type LeaseFence } from '../../lease/redis-leases.js';
import { holdSource } from './source-hold.js';

export type { LeaseFence };

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
  /** queue.lease_ttl_ms (RedisLeases raises it to at least 1 s). */
  ttlMs: number;
  /** Identifies this replica in logs, `status` and `cursor` refusals; default `host:pid`. */
  owner?: string;
  logger: Logger;
  /** queue.min_replicas_acked, for the fenced cursor save of `hold` (source-hold.ts). */
  minReplicasAcked?: number;
}

export function createRedisSourceLeases(opts: RedisLeasesOptions): RedisSourceLeases {
  const owner = opts.owner ?? leaseOwner();
  const client = createRedisConnection(opts.redisUrl, 'lock', opts.logger);
  const leases = new RedisLeases({
    client,
    membersKey: pollersKey(opts.prefix),
    owner,
    ttlMs: opts.ttlMs,
    logger: opts.logger,
    groupSize: () => opts.sources.length,
    what: 'source',
    holder: 'its poller',
  });

  return {
    async acquire(source, signal, onWait) {
      if (!opts.sources.includes(source))
        throw new FeedsyncError(`lease asked for unknown source ${source}`, false);
      const spec = {
        name: source,
        key: leaseKey(opts.prefix, source),
        tokenKey: leaseTokenKey(opts.prefix, source),
        group: 'sources',
      };
      return leases.acquire(spec, signal, onWait);
    },
    holder: (source) => readLeaseHolder(client, opts.prefix, source),
    hold: (source) =>
      holdSource(
        client,
        opts.prefix,
        source,
        opts.ttlMs,
        `${owner} (cursor command)`,
        opts.logger,
        opts.minReplicasAcked,
      ),
    fence: (source) => leases.fence(source),
    markLost: (source, reason) => leases.markLost(source, reason),
    held: () => leases.names(),
    async close() {
      await leases.close();
      await closeRedis(client);
    },
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
