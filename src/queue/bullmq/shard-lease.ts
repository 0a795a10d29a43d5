// Who delivers a shard: a lease per (sink, shard) with a fencing token (leases.ts), held by one
// `work` process for as long as it serves the shard; only that process runs a BullMQ worker on
// the shard's queue.
//
// BullMQ's job lock alone does not keep a frozen worker from delivering: when a worker is paused
// past its lock (a GC pause, a throttled container, SIGSTOP), BullMQ hands the job to another
// worker, and the resumed one, which never looks at its lock again, goes on delivering the same
// slice — copies, and two processes delivering one subject at once. So the consumer:
//
// - checks the lease by its own monotonic clock before each sink call (`valid()`): a consumer that
//   has not renewed within SELF_EXPIRY of the TTL starts nothing more and hands the slice back,
//   before the lease can expire and another process take the shard;
// - records the slice's progress after every sink call, with a script that writes only while the
//   lease and the job's lock are still its own (`saveProgress`): the next owner resumes exactly
//   after the last change delivered, and a stale consumer can move nothing;
// - hands sinks the shard's token (`fence()`), so a sink that can fence refuses a stale writer.
//
// The only deliveries a freeze can duplicate are the sink calls in flight at that moment; they are
// counted (feedsync_deliveries_after_lease_loss_total).
import type { Redis } from 'ioredis';
import type { DeliveryFence } from '../../sinks/sink.js';
import type { SliceProgress } from './attempts.js';
import { HELD } from '../../lease/redis-scripts.js';
import type { HeldRedisLease, LeaseSpec } from '../../lease/redis-leases.js';
import { backlogKey, bullPrefix, shardLeaseKey, shardLeaseTokenKey } from './names.js';
import { UNCOUNTED_SLICE } from './slice.js';
import { luaScript, runScript } from './scripts.js';

// KEYS: shard lease, job hash, job lock, backlog hash, the lease's token counter. ARGV: the lease
// value, the progress JSON, the job lock token, the sink, the lease TTL. Written only by the
// consumer holding both the shard (or a lease Redis forgot and nobody took since: HELD) and the
// job; the changes it moves past (delivered or dead-lettered) leave the sink's backlog in the same
// step. Progress never moves back: a write that ioredis sent again after NOSCRIPT may land after
// a later one, and then changes nothing.
const SAVE_PROGRESS = luaScript(
  'save_progress',
  `${HELD}
if not held(KEYS[1], KEYS[5], ARGV[1], ARGV[5]) then return 0 end
if redis.call('GET', KEYS[3]) ~= ARGV[3] then return 0 end
local before = 0
local ok, old = pcall(cjson.decode, redis.call('HGET', KEYS[2], 'progress') or '0')
if ok and type(old) == 'table' and tonumber(old.done) then before = tonumber(old.done) end
local done = tonumber(cjson.decode(ARGV[2]).done) or 0
if done < before then return 1 end
redis.call('HSET', KEYS[2], 'progress', ARGV[2])
if done > before and redis.call('HGET', KEYS[2], 'name') ~= ARGV[6] then
  redis.call('HINCRBY', KEYS[4], ARGV[4], before - done)
end
return 1`,
);

/** The lease of (sink, shard) under a queue tag; its share is counted per sink and tag. */
export function shardLeaseSpec(tag: string, sink: string, shard: number): LeaseSpec {
  return {
    name: `${tag}:${sink}.${shard}`,
    key: shardLeaseKey(tag, sink, shard),
    tokenKey: shardLeaseTokenKey(tag, sink, shard),
    group: `${tag}:${sink}`,
  };
}

export interface ShardLease {
  readonly token: number;
  /** Whether this consumer may start a sink call: renewed within SELF_EXPIRY of the TTL. */
  valid(): boolean;
  fence(): DeliveryFence;
  /** Records the slice's progress if the lease and the job are still ours; false when it was not written. */
  saveProgress(jobKey: string, lockToken: string, progress: SliceProgress): Promise<boolean>;
}

export function shardLease(
  connection: Redis,
  prefix: string,
  tag: string,
  sink: string,
  shard: number,
  held: HeldRedisLease,
  ttlMs: number,
): ShardLease {
  const { token, value, leaseKey, tokenKey } = held.fence;
  // Sinks keep one fencing token per scope. On a cluster the shard's token counter lives under the
  // source's tag, a counter apart from the one-Redis layout's: the tag is part of the scope there,
  // so a sink that saw higher tokens under another layout does not refuse the new counter's.
  const scope = tag === bullPrefix(prefix) ? `shard:${sink}:${shard}` : `shard:${sink}:${shard}:${tag}`;
  const valid = (): boolean => held.valid();
  const backlog = backlogKey(tag);
  return {
    token,
    valid,
    fence: () => ({ scope, token, valid }),
    async saveProgress(jobKey, lockToken, progress) {
      const written = await runScript(
        connection,
        SAVE_PROGRESS,
        [leaseKey, jobKey, `${jobKey}:lock`, backlog, tokenKey],
        [value, JSON.stringify(progress), lockToken, sink, String(ttlMs), UNCOUNTED_SLICE],
      );
      return Number(written) === 1;
    },
  };
}
