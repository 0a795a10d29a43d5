// How sources spread over `poll` replicas. Every replica heartbeats into a sorted set of live
// pollers (score = expiry, by Redis' clock: replicas on hosts with skewed clocks still agree on who
// is alive). A replica does not take a free lease while it already holds its share,
// ceil(sources / live replicas), and when it holds more than its share (a replica joined) it lets
// one lease go per heartbeat, after holding it at least one TTL so that leases do not flap. A dead
// replica drops out of the set within one TTL, like its leases, so a survivor's share grows just
// when the dead one's leases expire.
import type { Redis } from 'ioredis';
import { luaScript, runScript } from './scripts.js';

const HEARTBEAT = luaScript(
  'heartbeat',
  `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[2] ~= '0' then redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1]) end
return redis.call('ZCARD', KEYS[1])`,
);

export class Replicas {
  /** Live replicas at the last heartbeat (this one included). */
  live = 1;

  constructor(
    private readonly client: Redis,
    private readonly key: string,
    private readonly owner: string,
    private readonly ttlMs: number,
  ) {}

  async beat(): Promise<void> {
    this.live = Math.max(
      1,
      Number(await runScript(this.client, HEARTBEAT, [this.key], [this.owner, String(this.ttlMs)])),
    );
  }

  /** How many of `sources` this replica may hold. */
  share(sources: number): number {
    return Math.ceil(sources / Math.max(1, this.live));
  }

  async leave(): Promise<void> {
    await this.client.zrem(this.key, this.owner).catch(() => undefined);
  }
}

/** Over its share: the longest-held lease held at least one TTL (none while within the share). */
export function handOverCandidate(
  held: ReadonlyMap<string, { since: number; lost: AbortController }>,
  share: number,
  ttlMs: number,
): string | undefined {
  if (held.size <= share) return undefined;
  let oldest: [string, number] | undefined;
  for (const [source, h] of held) {
    if (Date.now() - h.since < ttlMs || h.lost.signal.aborted) continue;
    if (!oldest || h.since < oldest[1]) oldest = [source, h.since];
  }
  return oldest?.[0];
}
