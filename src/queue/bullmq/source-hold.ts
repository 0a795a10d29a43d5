// `cursor set/reset` in scaled mode: the command takes the source's lease like a poller would
// (the same lease module, a fresh token, renewed until released), so no poller starts on the
// source while the command runs, and its cursor write is checked against that lease inside
// Redis: a command that lost the lease (paused past it, Redis unreachable for a TTL) writes
// nothing.
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { FeedsyncError } from '../../core/errors.js';
import { RedisLeases } from '../../lease/redis-leases.js';
import type { HeldSource } from '../driver.js';
import { keySpace, laggingKey, leaseKey, leaseTokenKey, sourceStateKey, type Keys } from './names.js';
import { awaitReplicas } from './replication.js';
import { cursorFields } from './source-state.js';
import { luaScript, runScript } from './scripts.js';
import { HELD } from '../../lease/redis-scripts.js';

// KEYS: lease, state hash, lagging-sinks hash, the lease's token counter. ARGV: the lease value,
// cursor, seen_above, now, the lease TTL. The lease is judged as every holder's write judges it
// (redis-scripts.ts HELD): a lease a Redis that lost its last writes forgot is restored for the
// command unless a newer token was handed out.
// Sinks lagging past a rewind's new cursor go back to it (LaggingSinkRows.followCursor says why a
// skip forward leaves them). A lagging entry's JSON is written by hand: Redis's cjson writes an
// empty seenAbove as {} and a number with 14 significant digits (redis/redis#7520), too few for an
// event id up to 2^53; the values are numbers and a reason word of our own.
const SAVE_IF_HELD = luaScript(
  'save_if_held',
  `${HELD}
if not held(KEYS[1], KEYS[4], ARGV[1], ARGV[5]) then
  return redis.error_reply('FENCED the source lease was taken over')
end
local target = tonumber(ARGV[2])
redis.call('HSET', KEYS[2], 'cursor', ARGV[2], 'seen_above', ARGV[3], 'updated_at', ARGV[4])
local lag = redis.call('HGETALL', KEYS[3])
for i = 1, #lag, 2 do
  local e = cjson.decode(lag[i + 1])
  if e.cursor > target then
    redis.call('HSET', KEYS[3], lag[i], '{"cursor":' .. ARGV[2] .. ',"seenAbove":[],"reason":"' .. e.reason ..
      '","since":' .. string.format('%.0f', e.since) .. ',"eventAt":' .. string.format('%.0f', e.eventAt) .. '}')
  end
end
return 1`,
);

export async function holdSource(
  client: Redis,
  prefix: Keys,
  source: string,
  ttlMs: number,
  owner: string,
  logger: Logger,
  /** queue.min_replicas_acked: the save is reported done only once that many replicas have it. */
  minReplicasAcked = 0,
): Promise<HeldSource | { holder: string }> {
  const key = leaseKey(prefix, source);
  const leases = new RedisLeases({ client, owner, ttlMs, logger, what: 'source', holder: 'the command' });
  const held = await leases
    .tryOnce({ name: source, key, tokenKey: leaseTokenKey(prefix, source), group: 'commands' })
    .catch(async (err: unknown) => {
      await leases.close();
      throw err;
    });
  if (!('fence' in held)) {
    await leases.close();
    return held;
  }
  const value = held.fence.value;
  return {
    lost: held.lost,
    async release() {
      await held.release();
      await leases.close();
    },
    async save(eventId, seenAbove) {
      const f = cursorFields(eventId, seenAbove);
      try {
        await runScript(
          client,
          SAVE_IF_HELD,
          [key, sourceStateKey(prefix, source), laggingKey(prefix, source), held.fence.tokenKey],
          [value, f.cursor!, f.seen_above!, f.updated_at!, String(held.fence.ttlMs)],
        );
      } catch (err) {
        if (String((err as Error).message).includes('FENCED'))
          throw new FeedsyncError(
            `the cursor of "${source}" was not changed: a poller took the source while this command ran`,
            false,
          );
        throw err;
      }
      // Same connection as the save: WAIT covers it. Not durable → the command fails (non-zero
      // exit) saying so; running it again writes the same cursor.
      await awaitReplicas(client, minReplicasAcked, `the new cursor of "${source}"`, {
        tag: keySpace(prefix).of(source),
      });
    },
  };
}
