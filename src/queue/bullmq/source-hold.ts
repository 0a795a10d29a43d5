// `cursor set/reset` in scaled mode: the command takes the source's lease like a poller would (a
// fresh token), so no poller starts on the source while the command runs, and its cursor write is
// checked against that lease inside Redis: a command that lost the lease (paused past it, Redis
// unreachable for a TTL) writes nothing.
import type { Redis } from 'ioredis';
import { FeedsyncError } from '../../core/errors.js';
import type { HeldSource } from '../driver.js';
import { ACQUIRE, ownerOf, RELEASE, RENEW } from './lease-scripts.js';
import { keySpace, laggingKey, leaseKey, leaseTokenKey, sourceStateKey, type Keys } from './names.js';
import { awaitReplicas } from './replication.js';
import { cursorFields } from './source-state.js';
import { luaScript, runScript } from './scripts.js';

// KEYS: lease, state hash, lagging-sinks hash. ARGV: the lease value, cursor, seen_above, now.
// Sinks lagging past a rewind's new cursor go back to it (LaggingSinkRows.followCursor says why a
// skip forward leaves them).
const SAVE_IF_HELD = luaScript(
  'save_if_held',
  `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
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
  /** queue.min_replicas_acked: the save is reported done only once that many replicas have it. */
  minReplicasAcked = 0,
): Promise<HeldSource | { holder: string }> {
  const key = leaseKey(prefix, source);
  const reply = (await runScript(
    client,
    ACQUIRE,
    [key, leaseTokenKey(prefix, source)],
    [owner, String(ttlMs)],
  )) as [number, string | null];
  if (Number(reply[0]) === 0) return { holder: ownerOf(reply[1]) ?? 'unknown' };
  const value = String(reply[1]);
  const lost = new AbortController();
  const renew = setInterval(
    () => {
      runScript(client, RENEW, [key, leaseTokenKey(prefix, source)], [value, String(ttlMs)]).then(
        (ok) => Number(ok) === 1 || lost.abort(),
        () => undefined,
      );
    },
    Math.max(100, Math.floor(ttlMs / 3)),
  );
  renew.unref();
  return {
    lost: lost.signal,
    async release() {
      clearInterval(renew);
      await runScript(client, RELEASE, [key], [value]).catch(() => undefined);
    },
    async save(eventId, seenAbove) {
      const f = cursorFields(eventId, seenAbove);
      try {
        await runScript(
          client,
          SAVE_IF_HELD,
          [key, sourceStateKey(prefix, source), laggingKey(prefix, source)],
          [value, f.cursor!, f.seen_above!, f.updated_at!],
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
