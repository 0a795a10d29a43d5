// One page, one transaction: the slice jobs of every sink and shard, the source's new cursor and the
// commit counters go to Redis in a single MULTI/EXEC, so a crash leaves all of it or none of it.
//
// BullMQ adds a job with a Lua script; Job.addJob(transaction) queues that script call on an
// ioredis MULTI instead of running it (the way Queue.addBulk and FlowProducer add atomically).
// Fencing: the transaction runs under WATCH of the source's lease-token counter, which only changes
// when some replica acquires the lease. Before MULTI the token and the lease value are compared
// with ours; if another replica took the lease after that, EXEC aborts and nothing is written. A
// paused old holder therefore never overwrites a newer cursor nor adds jobs.
//
// MULTI does not roll back a command that fails at run time, so the cursor is written last, by a
// script that first checks every job of the page exists: a failed add leaves the cursor where it
// was (the jobs that did get in are no-ops when the page is read again, their ids being the same).
//
// WATCH is per connection, and any EXEC on it clears it: this module owns its connection and runs
// one commit at a time on it.
import { Job, type Queue } from 'bullmq';
import type { ChainableCommander, Redis } from 'ioredis';
import { FeedsyncError, errorMessage } from '../../core/errors.js';
import type { LeaseFence } from './lease.js';
import { backlogKey, commitStatsKey, sourceStateKey } from './names.js';
import type { ChangeSlice } from './slice.js';
import { cursorFields } from './source-state.js';

// KEYS: state hash, stats hash, lease key, backlog hash, then the job hash of every slice. ARGV:
// cursor, seen_above, now, the lease value ('' when unfenced), the changes queued per sink (JSON).
// The lease is checked again here, inside the transaction, besides the WATCH: whatever happens to
// the connection, a cursor moves only under the lease that read the page. The backlog counts
// changes (not slices) per sink, so `max_backlog`, `status` and the metrics mean the same thing
// with both drivers; the progress script of the workers (shard-lease.ts) counts them out.
const WRITE_CURSOR = `
if ARGV[4] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[4] then
  return redis.error_reply('FENCED the source lease is no longer ours; cursor not moved')
end
for i = 5, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    return redis.error_reply('job ' .. KEYS[i] .. ' of the page is missing; cursor not moved')
  end
end
redis.call('HSET', KEYS[1], 'cursor', ARGV[1], 'seen_above', ARGV[2], 'updated_at', ARGV[3])
redis.call('HINCRBY', KEYS[2], 'pages', 1)
redis.call('HINCRBY', KEYS[2], 'slices', #KEYS - 4)
for sink, n in pairs(cjson.decode(ARGV[5])) do
  if n > 0 then redis.call('HINCRBY', KEYS[4], sink, n) end
end
return 1`;

export interface PlannedSlice {
  queue: Queue<ChangeSlice>;
  jobId: string;
  changes: ChangeSlice['changes'];
}

export interface PagePlan {
  source: string;
  slices: PlannedSlice[];
  /** Changes queued per sink name. */
  queued: Record<string, number>;
  cursor: number;
  seenAbove: number[];
}

/** Thrown when the lease is no longer ours: nothing was written. */
export class LeaseFencedError extends FeedsyncError {
  constructor(source: string, detail: string) {
    super(`source ${source}: not committing the page, the lease is no longer ours (${detail})`, true);
  }
}

/** A slice id without the rewind generation a previous try may have added. */
function baseJobId(jobId: string): string {
  const at = jobId.indexOf('@');
  return at < 0 ? jobId : jobId.slice(0, at);
}

export interface PageCommitter {
  /** 'committed', or 'already' when Redis holds this very cursor already (a late earlier try). */
  commit(plan: PagePlan, fence: LeaseFence | undefined): Promise<'committed' | 'already'>;
}

export function createPageCommitter(opts: {
  /** Dedicated to commits (see the WATCH note above); the queues of the plans must use it. */
  connection: Redis;
  prefix: string;
  jobOptions: Record<string, unknown>;
}): PageCommitter {
  const { connection, prefix } = opts;
  const statsKey = commitStatsKey(prefix);
  // A reconnect between WATCH and EXEC would drop the WATCH silently: count connections, and give
  // up a commit whose connection changed underneath it (the poller retries the page).
  let connections = 0;
  connection.on('ready', () => connections++);
  let chain: Promise<unknown> = Promise.resolve();

  async function commitOnce(plan: PagePlan, fence: LeaseFence | undefined): Promise<'committed' | 'already'> {
    const stateKey = sourceStateKey(prefix, plan.source);
    // The BullMQ-aware client: its MULTI knows the job scripts. Every plan queue shares `connection`.
    const client = plan.slices[0] ? await plan.slices[0].queue.backend.client : connection;
    // Taken once connected (awaiting the client may have waited for the first 'ready').
    const epoch = connections;
    // WATCH, the fence check and the "already committed" check go out together: one round trip.
    // ioredis sends them in this order on the one connection, so the reads happen under the WATCH.
    const [, fenceValues, [cursor, seen, rewinds]] = await Promise.all([
      fence ? connection.watch(fence.tokenKey) : undefined,
      fence ? connection.mget(fence.tokenKey, fence.leaseKey) : undefined,
      connection.hmget(stateKey, 'cursor', 'seen_above', 'rewinds'),
    ]).catch(async (err: unknown) => {
      if (fence) await connection.unwatch().catch(() => undefined);
      throw err;
    });
    if (fence && fenceValues) {
      const [token, lease] = fenceValues;
      if (token !== String(fence.token) || lease !== fence.value) {
        await connection.unwatch();
        throw new LeaseFencedError(
          plan.source,
          token !== String(fence.token)
            ? `token ${token} is newer than ours, ${fence.token}`
            : 'the lease expired',
        );
      }
    }
    try {
      // A try that timed out on the caller's side may still have committed: Redis then holds
      // exactly this cursor, and committing again would count the page twice.
      if (cursor === String(plan.cursor) && seen === JSON.stringify(plan.seenAbove)) {
        if (fence) await connection.unwatch();
        return 'already';
      }
      // After `cursor set/reset` the same pages are read again: their slices get new ids, or BullMQ
      // would take them for the retained completed jobs of the first pass and add nothing.
      if (rewinds) for (const slice of plan.slices) slice.jobId = `${baseJobId(slice.jobId)}@${rewinds}`;
      // BullMQ's transaction is an ioredis MULTI with its scripts added; typed as the latter here.
      const tx = client.multi() as unknown as ChainableCommander;
      const adds: Promise<unknown>[] = [];
      for (const slice of plan.slices) {
        const job = new Job<ChangeSlice>(
          slice.queue,
          'slice',
          { changes: slice.changes },
          { ...opts.jobOptions, jobId: slice.jobId },
          slice.jobId,
        );
        // Queues the add script on the transaction; the job is written by EXEC below.
        adds.push(job.addJob(tx as never));
      }
      await Promise.all(adds);
      const fields = cursorFields(plan.cursor, plan.seenAbove);
      const jobKeys = plan.slices.map((slice) => slice.queue.toKey(slice.jobId));
      tx.eval(
        WRITE_CURSOR,
        4 + jobKeys.length,
        stateKey,
        statsKey,
        fence?.leaseKey ?? stateKey,
        backlogKey(prefix),
        ...jobKeys,
        fields.cursor!,
        fields.seen_above!,
        fields.updated_at!,
        fence?.value ?? '',
        JSON.stringify(plan.queued),
      );
      if (fence && connections !== epoch)
        throw new FeedsyncError(
          `redis reconnected during the commit of ${plan.source}; retrying the page`,
          true,
        );
      const results = (await tx.exec()) as [Error | null, unknown][] | null;
      if (results === null)
        throw new LeaseFencedError(plan.source, 'another replica took the lease meanwhile');
      const failed = results.find(([err]) => err);
      if (failed) {
        // An add failed (so the cursor script refused): the adds that succeeded stay, as no-ops
        // for the replay of the page.
        throw new FeedsyncError(
          `redis refused part of the page commit of ${plan.source}: ${errorMessage(failed[0])}`,
          true,
        );
      }
      return 'committed';
    } catch (err) {
      if (fence) await connection.unwatch().catch(() => undefined);
      throw err;
    }
  }

  return {
    commit(plan, fence) {
      const run = chain.then(() => commitOnce(plan, fence));
      chain = run.catch(() => undefined);
      return run;
    },
  };
}
