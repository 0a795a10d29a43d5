// The lease of a source in Redis: a key `<token> <owner>` with an expiry, taken with a fresh token
// from a counter that only grows. Pollers (lease.ts) and `cursor set/reset` (source-hold.ts) take
// the same lease, so they exclude each other.

import { luaScript } from './scripts.js';

// Take the lease when nobody holds it; a fresh token either way it is taken.
export const ACQUIRE = luaScript(
  'acquire_lease',
  `
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, redis.call('GET', KEYS[1])} end
local token = redis.call('INCR', KEYS[2])
local value = token .. ' ' .. ARGV[1]
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
return {token, value}`,
);
// Compare-and-act: only the holder may extend or delete.
export const RENEW = luaScript(
  'renew_lease',
  `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end`,
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
