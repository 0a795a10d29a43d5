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
import { errorMessage } from '../../core/errors.js';
import type { DeliveryFence } from '../../sinks/sink.js';
import type { SliceProgress } from './attempts.js';
import { SELF_EXPIRY } from './lease.js';
import { ACQUIRE, ownerOf, RELEASE, RENEW } from './lease-scripts.js';
import { shardLeaseKey, shardLeaseTokenKey } from './names.js';

// KEYS: shard lease, job hash, job lock. ARGV: the lease value, the progress JSON, the job lock token.
// Written only by the worker holding both the shard and the job.
const SAVE_PROGRESS = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('GET', KEYS[3]) ~= ARGV[3] then return 0 end
redis.call('HSET', KEYS[2], 'progress', ARGV[2])
return 1`;
// KEYS: job hash, job lock. ARGV: the job lock token. The job's progress as Redis has it now, or
// false when the job is no longer this worker's (it waited for the shard while another worker took
// the job over and maybe finished it: its Job object, read before, is stale).
const CLAIM = `
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return false end
return redis.call('HGET', KEYS[1], 'progress') or ''`;

export interface ShardLease {
  readonly token: number;
  /** Whether this worker may start a sink call: renewed within SELF_EXPIRY of the TTL. */
  valid(): boolean;
  fence(): DeliveryFence;
  /**
   * The job's progress as Redis holds it now, or undefined when the job is no longer this worker's
   * (its BullMQ lock token is not `lockToken`). Called once the lease is held, before delivering.
   */
  claim(jobKey: string, lockToken: string): Promise<unknown>;
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
  constructor(private readonly opts: ShardLeasesOptions) {}

  /**
   * Takes the lease of (sink, shard), waiting while another live worker holds it (a worker frozen
   * past BullMQ's lock still holds it until it expires). Undefined when `signal` aborts first.
   */
  async acquire(sink: string, shard: number, signal: AbortSignal): Promise<ShardLease | undefined> {
    const { connection, prefix, ttlMs, owner, logger } = this.opts;
    const key = shardLeaseKey(prefix, sink, shard);
    let announced = false;
    for (;;) {
      if (signal.aborted) return undefined;
      const sent = performance.now();
      try {
        const [token, value] = (await connection.eval(
          ACQUIRE,
          2,
          key,
          shardLeaseTokenKey(prefix, sink, shard),
          owner,
          String(ttlMs),
        )) as [number, string | null];
        if (Number(token) !== 0) return this.held(key, Number(token), String(value), sent, sink, shard);
        if (!announced)
          logger.info(
            { shard, holder: ownerOf(value) },
            'waiting for the shard lease: another worker still holds it (frozen past its job lock?)',
          );
        announced = true;
      } catch (err) {
        logger.warn({ shard, err: errorMessage(err) }, 'cannot take the shard lease; retrying');
      }
      if (!(await sleep(Math.min(1000, Math.floor(ttlMs / 4)), signal))) return undefined;
    }
  }

  private held(
    key: string,
    token: number,
    value: string,
    sent: number,
    sink: string,
    shard: number,
  ): ShardLease {
    const { connection, ttlMs } = this.opts;
    let renewedAt = sent;
    let lost = false;
    let released = false;
    const renew = setInterval(
      () => {
        const started = performance.now();
        connection.eval(RENEW, 1, key, value, String(ttlMs)).then(
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
    return {
      token,
      valid,
      fence: () => ({ scope: `shard:${sink}:${shard}`, token, valid }),
      async claim(jobKey, lockToken) {
        const progress = (await connection.eval(CLAIM, 2, jobKey, `${jobKey}:lock`, lockToken)) as
          string | null;
        if (progress === null) return undefined;
        return progress === '' ? null : (JSON.parse(progress) as unknown);
      },
      async saveProgress(jobKey, lockToken, progress) {
        const written = await connection.eval(
          SAVE_PROGRESS,
          3,
          key,
          jobKey,
          `${jobKey}:lock`,
          value,
          JSON.stringify(progress),
          lockToken,
        );
        return Number(written) === 1;
      },
      async release() {
        if (released) return;
        released = true;
        clearInterval(renew);
        await connection.eval(RELEASE, 1, key, value).catch(() => undefined);
      },
    };
  }
}
