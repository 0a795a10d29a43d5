// The scripts of every Redis lease (redis-leases.ts): a key `<token> <owner>` with an expiry, taken
// with a fresh token that only grows (NEXT_TOKEN), renewed or restored while held (HELD), released
// by its holder only. A source's poller and `cursor set/reset` take the same source lease, so they
// exclude each other.

import { luaScript } from '../queue/bullmq/scripts.js';

/**
 * Lua: sets `token` to a fencing token that only grows, even when Redis forgets its last writes (a
 * host crash before the AOF fsync, a failover to a lagging replica): the Redis clock in
 * milliseconds, or one above the last token of KEYS[2] when that is ahead. A counter (INCR) handed
 * such a Redis gives out tokens again that were already used, and a mirror that remembers the
 * highest token it applied then refuses the legitimate writer. This rests on the Redis hosts'
 * clocks agreeing to within a failover's time (NTP), and on fewer than 1,000 tokens a second per
 * key. Tokens stay below 10^14, which Lua prints as integers.
 */
export const NEXT_TOKEN = `
local now = redis.call('TIME')
local token = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if token <= last then token = last + 1 end
redis.call('SET', KEYS[2], string.format('%d', token))`;

// Take the lease when nobody holds it; a fresh token either way it is taken.
export const ACQUIRE = luaScript(
  'acquire_lease',
  `
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, redis.call('GET', KEYS[1])} end
${NEXT_TOKEN}
local value = string.format('%d', token) .. ' ' .. ARGV[1]
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
return {token, value}`,
);
/**
 * Lua: `held(leaseKey, tokenKey, value, ttl)`, true while the lease is the holder's `value`. A
 * Redis that lost its last writes (a host crash before the AOF fsync, a failover to a replica that
 * lagged) can forget the holder's lease, or show again a lease from before it, with a lower token:
 * tokens only grow, and the holder took the lease only once that one had gone. Either way the
 * holder's lease is restored, with the TTL, unless a token above the holder's was handed out since:
 * nobody newer took it, so the holder's work goes on instead of being handed back and done again,
 * and the source does not wait a TTL for the stale key to expire. A lease with a higher token (taken
 * by another process) is never overwritten.
 */
export const HELD = `
local function held(leaseKey, tokenKey, value, ttl)
  local now = redis.call('GET', leaseKey)
  if now == value then return true end
  local token = tonumber(string.match(value, '^(%d+) '))
  if not token then return false end
  if now then
    local shown = tonumber(string.match(now, '^(%d+) '))
    if not shown or shown >= token then return false end
  end
  local last = tonumber(redis.call('GET', tokenKey) or '0') or 0
  if last > token then return false end
  if last < token then redis.call('SET', tokenKey, string.format('%d', token)) end
  redis.call('SET', leaseKey, value, 'PX', ttl)
  return true
end`;

/**
 * What HELD's `held()` will decide, from the lease key and the token counter read beforehand:
 * undefined when the lease is the holder's `value` (or may be restored for it), else why not. A
 * page commit checks this before it queues anything, with both keys WATCHed until its EXEC, so the
 * script's held() finds the same.
 */
export function heldRefusal(
  value: string,
  token: number,
  lease: string | null,
  counter: string | null,
): string | undefined {
  if (lease === value) return undefined;
  if (lease !== null) {
    const shown = tokenOf(lease);
    if (shown === undefined || shown >= token)
      return `the lease is held under token ${shown ?? 'unknown'}, ours is ${token}`;
  }
  const last = Number(counter ?? '0') || 0;
  if (last > token) return `token ${last} was handed out after ours, ${token}`;
  return undefined;
}

/** The token of a lease value `<token> <owner>`, as HELD's `^(%d+) ` reads it. */
function tokenOf(value: string): number | undefined {
  const space = value.indexOf(' ');
  const digits = space > 0 ? value.slice(0, space) : '';
  return /^\d+$/.test(digits) ? Number(digits) : undefined;
}

// Only the holder may extend. KEYS: lease, its token counter. ARGV: the lease value, TTL.
export const RENEW = luaScript(
  'renew_lease',
  `${HELD}
if held(KEYS[1], KEYS[2], ARGV[1], ARGV[2]) then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`,
);
export const RELEASE = luaScript(
  'release_lease',
  `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end`,
);

/** `<token> <owner>` → owner. */
export function ownerOf(value: string | null | undefined): string | undefined {
  if (!value) return undefined;
  const space = value.indexOf(' ');
  return space < 0 ? value : value.slice(space + 1);
}
