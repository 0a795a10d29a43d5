// Who delivers a shard: a lease per (sink, shard) with a fencing token, held by the worker process
// for as long as it delivers one slice of that shard.
//
// BullMQ's job lock alone does not keep a frozen worker from delivering: when a worker is paused
// past its lock (a GC pause, a throttled container, SIGSTOP), BullMQ hands the job to another
// worker, and the resumed one, which never looks at its lock again, goes on delivering the same
// slice — copies, and two processes delivering one subject at once. So a worker also takes the
// shard's lease before delivering a slice, and:
//
// - checks it by its own monotonic clock before each sink call (`valid()`): a worker that has not
//   renewed within SELF_EXPIRY of the TTL starts nothing more and hands the slice back, before the
//   lease can expire and another worker take the shard;
// - records the slice's progress after every sink call, with a script that writes only while the
//   lease is still this worker's (`saveProgress`): the next owner resumes exactly after the last
//   change delivered, and a stale worker can move nothing;
// - hands sinks the shard's token (`fence()`), so a sink that can fence refuses a stale writer.
//
// The only deliveries a freeze can duplicate are the sink calls in flight at that moment; they are
// counted (feedsync_deliveries_after_lease_loss_total).
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { sleep } from '../../backoff.js';
import type { DeliveryFence } from '../../sinks/sink.js';
import type { SliceProgress } from './attempts.js';
import { SELF_EXPIRY } from './lease.js';
import { NEXT_TOKEN, ownerOf, RELEASE, RENEW } from './lease-scripts.js';
import { warnRedisFailure } from './redis-monitor.js';
import { luaScript, runScript } from './scripts.js';

/** How often a worker asks again for a shard another worker holds. */
const RETRY_MS = 100;
import { backlogKey, bullPrefix, shardLeaseKey, shardLeaseTokenKey } from './names.js';

// KEYS: shard lease, job hash, job lock, backlog hash. ARGV: the lease value, the progress JSON,
// the job lock token, the sink. Written only by the worker holding both the shard and the job; the
// changes it moves past (delivered or dead-lettered) leave the sink's backlog in the same step.
// Progress never moves back: a write that ioredis sent again after NOSCRIPT may land after a later
// one, and then changes nothing.
const SAVE_PROGRESS = luaScript(
  'save_progress',
  `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('GET', KEYS[3]) ~= ARGV[3] then return 0 end
local before = 0
local ok, old = pcall(cjson.decode, redis.call('HGET', KEYS[2], 'progress') or '0')
if ok and type(old) == 'table' and tonumber(old.done) then before = tonumber(old.done) end
local done = tonumber(cjson.decode(ARGV[2]).done) or 0
if done < before then return 1 end
redis.call('HSET', KEYS[2], 'progress', ARGV[2])
if done > before then redis.call('HINCRBY', KEYS[4], ARGV[4], before - done) end
return 1`,
);
// Takes the shard for one slice job, in one round trip. KEYS: shard lease, its token counter, the
// job hash, the job lock. ARGV: owner, TTL, the job lock token, '1' when a lease of this owner is
// stale (nothing in this process holds it). Returns {0, holder} while another worker holds the
// shard; {-1} when the job is no longer this worker's (it waited for the shard while another
// worker took the job over and maybe finished it: its Job object is stale); else {token, lease
// value, the job's progress as Redis has it now}.
const TAKE = luaScript(
  'take_shard',
  `
local held = redis.call('GET', KEYS[1])
if held and not (ARGV[4] == '1' and string.sub(held, (string.find(held, ' ', 1, true) or 0) + 1) == ARGV[1]) then
  return {0, held}
end
if redis.call('GET', KEYS[4]) ~= ARGV[3] then return {-1} end
${NEXT_TOKEN}
local value = string.format('%d', token) .. ' ' .. ARGV[1]
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
return {token, value, redis.call('HGET', KEYS[3], 'progress') or ''}`,
);

export interface ShardLease {
  readonly token: number;
  /** The job's progress as Redis held it when the lease was taken (JSON-decoded; null: none). */
  readonly progress: unknown;
  /** Whether this worker may start a sink call: renewed within SELF_EXPIRY of the TTL. */
  valid(): boolean;
  fence(): DeliveryFence;
  /** Records the slice's progress if the lease and the job are still ours; false when it was not written. */
  saveProgress(jobKey: string, lockToken: string, progress: SliceProgress): Promise<boolean>;
  release(): Promise<void>;
}

export interface ShardLeasesOptions {
  connection: Redis;
  prefix: string;
  ttlMs: number;
  owner: string;
  logger: Logger;
}

export class ShardLeases {
  /**
   * The lease keys a slice delivery of this process holds now. A lease of this process's own in
   * Redis that none holds was left by a delivery that ended while Redis was away (its release
   * failed, e.g. across a failover, where the promoted replica has it): taken over at once rather
   * than waited out for a whole TTL.
   */
  private readonly active = new Set<string>();

  constructor(private readonly opts: ShardLeasesOptions) {}

  /**
   * Takes the lease of (sink, shard) for one slice job, waiting while another live worker holds it
   * (a worker frozen past BullMQ's lock still holds it until it expires). Undefined when `signal`
   * aborts first; 'not-ours' when the job went to another worker meanwhile.
   */
  async acquire(
    /** The BullMQ prefix of the shard's queue: the lease shares its slot (names.ts). */
    tag: string,
    sink: string,
    shard: number,
    job: { key: string; lockToken: string },
    signal: AbortSignal,
  ): Promise<ShardLease | 'not-ours' | undefined> {
    const { connection, ttlMs, owner, logger } = this.opts;
    const key = shardLeaseKey(tag, sink, shard);
    let announced = false;
    for (;;) {
      if (signal.aborted) return undefined;
      const sent = performance.now();
      try {
        const reply = (await runScript(
          connection,
          TAKE,
          [key, shardLeaseTokenKey(tag, sink, shard), job.key, `${job.key}:lock`],
          [owner, String(ttlMs), job.lockToken, this.active.has(key) ? '0' : '1'],
        )) as [number, string?, string?];
        const token = Number(reply[0]);
        if (token === -1) return 'not-ours';
        if (token > 0) {
          const progress = reply[2] ? (JSON.parse(reply[2]) as unknown) : null;
          return this.held(tag, key, token, String(reply[1]), progress, sent, sink, shard);
        }
        if (!announced)
          logger.info(
            { shard, holder: ownerOf(reply[1]) },
            'waiting for the shard lease: another worker still holds it (frozen past its job lock?)',
          );
        announced = true;
      } catch (err) {
        warnRedisFailure(connection, logger, err, { shard }, 'cannot take the shard lease; retrying');
      }
      if (!(await sleep(RETRY_MS, signal))) return undefined;
    }
  }

  private held(
    tag: string,
    key: string,
    token: number,
    value: string,
    progress: unknown,
    sent: number,
    sink: string,
    shard: number,
  ): ShardLease {
    const { connection, ttlMs } = this.opts;
    const backlog = backlogKey(tag);
    // Sinks keep one fencing token per scope. On a cluster the shard's token counter lives under
    // the shard's own tag, a counter apart from the one-Redis layout's (and from the earlier
    // cluster layout's, per source): the tag is part of the scope there, so a sink that saw higher
    // tokens under another layout does not refuse the new counter's.
    const scope =
      tag === bullPrefix(this.opts.prefix) ? `shard:${sink}:${shard}` : `shard:${sink}:${shard}:${tag}`;
    let renewedAt = sent;
    let lost = false;
    let released = false;
    const renew = setInterval(
      () => {
        const started = performance.now();
        runScript(connection, RENEW, [key], [value, String(ttlMs)]).then(
          (ok) => {
            if (Number(ok) === 1) renewedAt = started;
            else lost = true;
          },
          () => undefined,
        );
      },
      Math.max(100, Math.floor(ttlMs / 3)),
    );
    renew.unref();
    const valid = (): boolean => !lost && !released && performance.now() - renewedAt < ttlMs * SELF_EXPIRY;
    this.active.add(key);
    return {
      token,
      progress,
      valid,
      fence: () => ({ scope, token, valid }),
      async saveProgress(jobKey, lockToken, progress) {
        const written = await runScript(
          connection,
          SAVE_PROGRESS,
          [key, jobKey, `${jobKey}:lock`, backlog],
          [value, JSON.stringify(progress), lockToken, sink],
        );
        return Number(written) === 1;
      },
      release: async () => {
        if (released) return;
        released = true;
        clearInterval(renew);
        this.active.delete(key);
        await runScript(connection, RELEASE, [key], [value]).catch(() => undefined);
      },
    };
  }
}
