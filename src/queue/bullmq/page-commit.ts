// One page, one transaction: the slice jobs of every sink and shard, the source's new cursor and the
// commit counters go to Redis in a single MULTI/EXEC, so a crash leaves all of it or none of it.
//
// BullMQ adds a job with a Lua script; Job.addJob(transaction) queues that script call on an
// ioredis MULTI instead of running it (the way Queue.addBulk and FlowProducer add atomically).
// Fencing: the transaction runs under WATCH of the source's lease-token counter, which only changes
// when some replica acquires the lease. Before MULTI the token and the lease value are read and
// judged as the cursor script's HELD will judge them (heldRefusal); if another replica took the
// lease after that, EXEC aborts and nothing is written. A paused old holder therefore never
// overwrites a newer cursor nor adds jobs.
//
// MULTI does not roll back a command that fails at run time, so the cursor is written last, by a
// script that first checks every job of the page exists: a failed add leaves the cursor where it
// was. Which add could fail at run time? Not one refused for memory: under maxmemory Redis refuses
// the transaction whole (EXECABORT when its scripts are queued; a script is refused before its
// first write, and every script of one EXEC sees the same verdict), as the producer suite's OOM
// test shows. A page is queued once by this commit, not by finding job ids BullMQ still holds: ids
// are fresh per commit (slice.ts), and a completed job kept for dashboards is never taken for one.
//
// On a Redis Cluster every key of a source, its shard queues included, shares the source's hash
// tag (names.ts): the same MULTI, in one slot.
//
// WATCH is per connection, and any EXEC on it clears it: this module owns its connection and runs
// one commit at a time on it.
import type { Queue } from 'bullmq';
import type { ChainableCommander, Redis } from 'ioredis';
import { FeedsyncError, errorMessage } from '../../core/errors.js';
import type { LeaseFence } from './lease.js';
import { PositionLost, type FeedPosition } from '../queue.js';
import {
  CatchUpRefused,
  LOST_IDS_KEPT,
  MAX_PENDING_IDS,
  samePosition,
  type LagReason,
} from '../sink-positions.js';
import {
  backlogKey,
  commitStatsKey,
  keySpace,
  knownSinksKey,
  laggingKey,
  lostKey,
  parkedIdsKey,
  sourceStateKey,
  type Keys,
} from './names.js';
import { nodeForKey, unwatchKey } from './redis.js';
import { awaitReplicas } from './replication.js';
import { luaScript, queueScript, reconnectIfFlushed } from './scripts.js';
import { HELD, heldRefusal } from '../../lease/redis-scripts.js';
import {
  commitToken,
  COUNTED_SLICE,
  SliceJob,
  sliceJobId,
  UNCOUNTED_SLICE,
  type ChangeSlice,
} from './slice.js';
import { cursorFields, parseSeen } from './source-state.js';

// KEYS: state hash, stats hash, lease key, backlog hash, lagging-sinks hash, known-sinks hash, the
// lease's token counter, the parked-ids set of every sink passed (ARGV[6].pass order), then the
// job hash of every slice. ARGV: cursor, seen_above, now, the lease value ('' when unfenced), the
// changes queued per sink (JSON; counted in the backlog here), the sinks this page parks (sink →
// its lagging entry) and passes (their ids) as JSON, the number of slices, the slices' name, the
// lease TTL.
// Event ids cross into Lua as strings and stay strings (set members, the lost ids' JSON): cjson
// writes a Lua number with 14 significant digits, so an id above 10^14 would come back as another
// (redis/redis#7520).
// The lease is checked again here, inside the transaction, besides the WATCH: whatever happens to
// the connection, a cursor moves only under the lease that read the page. It is checked as every
// holder's write checks it (redis-scripts.ts HELD): a lease a Redis that lost its last writes
// forgot, or shows from before it, is restored for its holder unless a newer token was handed out,
// instead of the source being given up for a TTL. The backlog counts
// changes (not slices) per sink, so `max_backlog`, `status` and the metrics mean the same thing
// with both drivers; the progress script of the workers (shard-lease.ts) counts them out.
const WRITE_CURSOR = luaScript(
  'write_cursor',
  `${HELD}
if ARGV[4] ~= '' and not held(KEYS[3], KEYS[7], ARGV[4], ARGV[9]) then
  return redis.error_reply('FENCED the source lease is no longer ours; cursor not moved')
end
local lag = cjson.decode(ARGV[6])
local jobs = 8 + #lag.pass
for i = jobs, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    return redis.error_reply('job ' .. KEYS[i] .. ' of the page is missing; cursor not moved')
  end
end
for i = jobs, #KEYS do redis.call('HSET', KEYS[i], 'name', ARGV[8]) end
for sink, entry in pairs(lag.park) do
  if redis.call('HEXISTS', KEYS[5], sink) == 0 then
    redis.call('HINCRBY', KEYS[6], sink, 1)
    redis.call('HSET', KEYS[5], sink, entry)
  end
end
for i, sink in ipairs(lag.pass) do
  local ids = lag.ids[i]
  if #ids > 0 and redis.call('SCARD', KEYS[7 + i]) < lag.max then
    for j = 1, #ids, 1000 do redis.call('SADD', KEYS[7 + i], unpack(ids, j, math.min(j + 999, #ids))) end
  end
end
redis.call('HSET', KEYS[1], 'cursor', ARGV[1], 'seen_above', ARGV[2], 'updated_at', ARGV[3])
redis.call('HINCRBY', KEYS[2], 'pages', 1)
redis.call('HINCRBY', KEYS[2], 'slices', ARGV[7])
for sink, n in pairs(cjson.decode(ARGV[5])) do
  if n > 0 then
    redis.call('HINCRBY', KEYS[4], sink, n)
    redis.call('HINCRBY', KEYS[2], 'changes', n)
  end
end
return 1`,
);

// One catch-up page of one sink (sink-positions.ts). KEYS: lease key, known-sinks hash,
// lagging-sinks hash, the sink's parked-ids set, backlog hash, lost-upstream hash, the lease's
// token counter, then the job hash of every slice. ARGV: the lease value, sink, generation, its new
// lagging entry, '1' to rejoin the shared stream, the ids it saw (JSON), the changes queued
// (counted in the backlog here), now, the lost ids kept, the slices' name, the lease TTL.
// Refused unless the sink is still lagging with that generation (a replay moved it). Returns, on
// rejoining, the parked ids never seen again.
const CATCH_UP = luaScript(
  'catch_up',
  `${HELD}
if ARGV[1] ~= '' and not held(KEYS[1], KEYS[7], ARGV[1], ARGV[11]) then
  return redis.error_reply('FENCED the source lease is no longer ours; catch-up not committed')
end
if redis.call('HGET', KEYS[2], ARGV[2]) ~= ARGV[3] or redis.call('HEXISTS', KEYS[3], ARGV[2]) == 0 then
  return redis.error_reply('REFUSED the sink was moved meanwhile; catch-up not committed')
end
for i = 8, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    return redis.error_reply('job ' .. KEYS[i] .. ' of the page is missing; position not moved')
  end
end
for i = 8, #KEYS do redis.call('HSET', KEYS[i], 'name', ARGV[10]) end
local ids = cjson.decode(ARGV[6])
for j = 1, #ids, 1000 do redis.call('SREM', KEYS[4], unpack(ids, j, math.min(j + 999, #ids))) end
if tonumber(ARGV[7]) > 0 then redis.call('HINCRBY', KEYS[5], ARGV[2], ARGV[7]) end
if ARGV[5] == '1' then
  local lost = redis.call('SMEMBERS', KEYS[4])
  redis.call('DEL', KEYS[4])
  redis.call('HDEL', KEYS[3], ARGV[2])
  if #lost > 0 then
    local count = #lost
    local before = redis.call('HGET', KEYS[6], ARGV[2])
    if before then count = count + (cjson.decode(before).count or 0) end
    local ids = {}
    for i = 1, math.min(#lost, tonumber(ARGV[9])) do ids[i] = lost[i] end
    redis.call('HSET', KEYS[6], ARGV[2], cjson.encode({count = count, ids = ids, at = tonumber(ARGV[8])}))
  end
  return lost
end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[4])
return {}`,
);

/** A lagging sink's entry in the lagging-sinks hash (its generation lives in the known-sinks hash). */
export interface LaggingEntry extends FeedPosition {
  reason: LagReason;
  since: number;
  eventAt: number;
}

export interface PlannedSlice {
  sink: string;
  shard: number;
  /** The sink shard's queue on the committer's connection. */
  queue: Queue<ChangeSlice>;
  changes: ChangeSlice['changes'];
}

export interface PagePlan {
  source: string;
  slices: PlannedSlice[];
  /** Changes queued per sink name. */
  queued: Record<string, number>;
  cursor: number;
  seenAbove: number[];
  /** Shared pages: the sinks it was planned as lagging (checked in the commit, under WATCH). */
  laggingAssumed?: string[];
  /**
   * Shared pages: the position the page was read after. The stored cursor must still be there, and
   * a sink this page parks resumes from it (default: the stored cursor).
   */
  from?: FeedPosition;
  /** Shared pages: sinks this page parks (at `from`) and the ids passed for every parked sink. */
  lagging?: { park: string[]; passes: Map<string, number[]> };
  /** A catch-up page of one sink: moves that sink's position, not the source's cursor. */
  catchUp?: {
    sink: string;
    generation: number;
    entry: LaggingEntry;
    eventIds: number[];
    join: boolean;
    /** The sink's position the page was read after. */
    from: FeedPosition;
    /** The source's position its events were told apart by (passed by the shared stream or not). */
    shared: FeedPosition;
  };
}

/** Thrown when the lease is no longer ours: nothing was written. */
export class LeaseFencedError extends FeedsyncError {
  constructor(source: string, detail: string) {
    super(`source ${source}: not committing the page, the lease is no longer ours (${detail})`, true);
  }
}

/**
 * The commit raced a change it watches (the lease's token counter, the sinks off the shared stream,
 * a catch-up sink's position): nothing was written; plan the page again.
 */
export class CommitRaced extends FeedsyncError {
  constructor(
    source: string,
    readonly lagging: string[],
  ) {
    super(
      `source ${source}: its lease or sinks moved during the page commit; nothing written, planned again`,
      true,
    );
  }
}

function sameSet(a: string[], b: string[]): boolean {
  return a.length === b.length && a.every((x) => b.includes(x));
}

export interface PageCommitter {
  /**
   * 'committed', or 'already' when Redis holds this very cursor already (a late earlier try); a
   * catch-up page that rejoined the shared stream: the parked ids never seen again.
   */
  commit(plan: PagePlan, fence: LeaseFence | undefined): Promise<'committed' | 'already' | number[]>;
  /** Runs `work` alone on the commit connection, between commits (a WATCH is per connection). */
  exclusive<T>(work: () => Promise<T>): Promise<T>;
}

export function createPageCommitter(opts: {
  /** Dedicated to commits (see the WATCH note above); the queues of the plans must use it. */
  connection: Redis;
  /** Where the keys are (a bare queue.prefix: one Redis). */
  keys: Keys;
  jobOptions: Record<string, unknown>;
  /** queue.min_replicas_acked: WAIT for this many replicas after each commit (replication.ts). */
  minReplicasAcked?: number;
}): PageCommitter {
  const { connection } = opts;
  const prefix = keySpace(opts.keys);
  const minReplicas = opts.minReplicasAcked ?? 0;
  // A reconnect between WATCH and EXEC would drop the WATCH silently: count connections, and give
  // up a commit whose connection changed underneath it (the poller retries the page).
  let connections = 0;
  connection.on('ready', () => connections++);
  // Sources whose cursor this committer has found in Redis, or written there. The first commit of a
  // source finds none; a later one that finds none met a Redis that lost the source's state whole
  // (its first commit in a cut AOF tail, a failover to a replica that never had it), and must be
  // sent back to the start position like one that finds an older cursor: going on from its own
  // position would leave the forgotten commits' changes queued nowhere.
  const stored = new Set<string>();
  let chain: Promise<unknown> = Promise.resolve();

  async function commitOnce(
    plan: PagePlan,
    fence: LeaseFence | undefined,
  ): Promise<'committed' | 'already' | number[]> {
    const stateKey = sourceStateKey(prefix, plan.source);
    // Every key of the commit carries the source's tag: one slot, also on a Redis Cluster.
    const tag = prefix.of(plan.source);
    const knownKey = knownSinksKey(prefix, plan.source);
    const catchUp = plan.catchUp;
    // The BullMQ-aware client: its MULTI knows the job scripts. Every plan queue shares `connection`.
    const client = (plan.slices[0] ? await plan.slices[0].queue.backend.client : connection) as Redis;
    // Taken once connected (awaiting the client may have waited for the first 'ready').
    const epoch = connections;
    // WATCH, the fence check and the "already committed" check go out together: one round trip.
    // ioredis sends them in this order on the one connection, so the reads happen under the WATCH.
    // Both watch the known-sinks hash, which every park, backfill and replay bumps: a sink moved
    // after the plan was made aborts the EXEC (a shared page planned it as live, or a catch-up
    // page was read for its previous position).
    // Not the lease key: a takeover moves the token counter, and a lease that merely ran out (or
    // was renewed) meanwhile is judged by the cursor script's HELD, which restores it for us.
    // A catch-up page also watches the sink's position (the lagging-sinks hash), which another
    // catch-up commit moves: the same check as a shared page's cursor, for its own reader.
    const lagKey = laggingKey(prefix, plan.source);
    const watched = [...(fence ? [fence.tokenKey] : []), knownKey, ...(catchUp ? [lagKey] : [])];
    // On a cluster the WATCH holds on one node's connection, which the client may replace (or the
    // slot move) without a word: the EXEC must go out on that same connection.
    const node = nodeForKey(connection, knownKey);
    const [, fenceValues, [cursor, seen], generation, lagging, position] = await Promise.all([
      connection.watch(...watched),
      fence ? connection.mget(fence.tokenKey, fence.leaseKey) : undefined,
      connection.hmget(stateKey, 'cursor', 'seen_above'),
      catchUp ? connection.hget(knownKey, catchUp.sink) : undefined,
      catchUp ? undefined : connection.hkeys(lagKey),
      catchUp ? connection.hget(lagKey, catchUp.sink) : undefined,
    ]).catch(async (err: unknown) => {
      await unwatchKey(connection, knownKey).catch(() => undefined);
      throw err;
    });
    const storedCursor: FeedPosition | undefined =
      cursor === null ? undefined : { cursor: Number(cursor), seenAbove: parseSeen(seen) };
    if (storedCursor) stored.add(plan.source);
    if (fence && fenceValues) {
      const [counter, lease] = fenceValues;
      const refusal = heldRefusal(fence.value, fence.token, lease, counter);
      if (refusal) {
        await unwatchKey(connection, knownKey);
        throw new LeaseFencedError(plan.source, refusal);
      }
    }
    try {
      if (catchUp) {
        if (generation !== String(catchUp.generation))
          throw new CatchUpRefused(
            plan.source,
            catchUp.sink,
            catchUp.generation,
            generation ? Number(generation) : undefined,
          );
        // Only from the position the page was read after: a late try that landed has moved it (or
        // taken the sink back to the shared stream), and the catch-up reads on from where it is.
        const stored = position ? (JSON.parse(position) as FeedPosition) : undefined;
        if (!samePosition(stored, catchUp.from))
          throw new CatchUpRefused(
            plan.source,
            catchUp.sink,
            catchUp.generation,
            Number(generation),
            'its position moved since the page was read (read again from where it is)',
          );
        // Its events were queued only where the shared stream had passed them: a poller whose view
        // of the shared cursor lags Redis (a shared commit that landed after it gave up on it)
        // would leave the events in between to neither.
        if (storedCursor && !samePosition(storedCursor, catchUp.shared))
          throw new CatchUpRefused(
            plan.source,
            catchUp.sink,
            catchUp.generation,
            Number(generation),
            `the source's cursor is at ${cursor}, not at ${catchUp.shared.cursor} as the page was read for`,
          );
      } else {
        if (plan.laggingAssumed && !sameSet(plan.laggingAssumed, lagging ?? []))
          throw new CommitRaced(plan.source, lagging ?? []);
        // A try that timed out on the caller's side may still have committed: Redis then holds
        // exactly this cursor, and committing again would count the page twice. Only a commit
        // that moves the position can tell: the feed audit queues events the cursor passed over
        // at the position the source holds already (a late try of that one queues them again).
        const target = { cursor: plan.cursor, seenAbove: plan.seenAbove };
        const moves = !plan.from || !samePosition(plan.from, target);
        if (moves && samePosition(storedCursor, target)) {
          await unwatchKey(connection, knownKey);
          // The earlier try may have failed its own WAIT (or run on a connection since replaced):
          // the page counts as committed only once the replicas have it.
          await awaitReplicas(connection, minReplicas, `the page commit of ${plan.source}`, {
            tag,
            touch: true,
          });
          return 'already';
        }
        // The cursor this page follows must be the stored one: a Redis that lost its last commits
        // (or a cursor moved meanwhile) sends the poller back to what Redis holds, so the pages
        // it forgot are read again instead of skipped.
        const gone = !storedCursor && stored.has(plan.source);
        if (plan.from && (gone || (storedCursor && !samePosition(storedCursor, plan.from)))) {
          await unwatchKey(connection, knownKey);
          // Sent back to the start, the poller's next commit is a first one again.
          stored.delete(plan.source);
          throw new PositionLost(plan.source, plan.from, storedCursor);
        }
      }
      // BullMQ's transaction is an ioredis MULTI with its scripts added; typed as the latter here.
      const tx = client.multi() as unknown as ChainableCommander;
      const adds: Promise<unknown>[] = [];
      const counted = plan.queued;
      // Fresh ids for every try: each add creates its job, so the counts below are exact.
      const commit = commitToken();
      const jobIds = plan.slices.map((slice) => sliceJobId(slice.changes, commit));
      for (const [i, slice] of plan.slices.entries()) {
        const job = new SliceJob(
          slice.queue,
          UNCOUNTED_SLICE,
          { changes: slice.changes },
          { ...opts.jobOptions, jobId: jobIds[i]! },
          jobIds[i],
        );
        // Queues the add script on the transaction; the job is written by EXEC below.
        adds.push(job.addJob(tx as never));
      }
      await Promise.all(adds);
      const jobKeys = plan.slices.map((slice, i) => slice.queue.toKey(jobIds[i]!));
      if (catchUp) {
        const { sink, entry } = catchUp;
        queueScript(
          tx,
          CATCH_UP,
          [
            fence?.leaseKey ?? knownKey,
            knownKey,
            lagKey,
            parkedIdsKey(prefix, plan.source, sink),
            backlogKey(tag),
            lostKey(prefix, plan.source),
            fence?.tokenKey ?? knownKey,
            ...jobKeys,
          ],
          [
            fence?.value ?? '',
            sink,
            String(catchUp.generation),
            JSON.stringify(entry),
            catchUp.join ? '1' : '0',
            JSON.stringify(catchUp.eventIds.map(String)),
            String(counted[sink] ?? 0),
            String(Date.now()),
            String(LOST_IDS_KEPT),
            COUNTED_SLICE,
            String(fence?.ttlMs ?? 0),
          ],
        );
      } else {
        const fields = cursorFields(plan.cursor, plan.seenAbove);
        const lag = plan.lagging;
        const from = plan.from ?? { cursor: Number(cursor ?? 0), seenAbove: parseSeen(seen ?? null) };
        const now = Date.now();
        const park: Record<string, string> = {};
        for (const sink of lag?.park ?? []) {
          const entry: LaggingEntry = { ...from, reason: 'parked', since: now, eventAt: now };
          park[sink] = JSON.stringify(entry);
        }
        const pass = [...(lag?.passes.keys() ?? [])];
        const lagArg = {
          park,
          pass,
          ids: pass.map((sink) => lag!.passes.get(sink)!.map(String)),
          max: MAX_PENDING_IDS,
        };
        queueScript(
          tx,
          WRITE_CURSOR,
          [
            stateKey,
            commitStatsKey(tag),
            fence?.leaseKey ?? stateKey,
            backlogKey(tag),
            lagKey,
            knownKey,
            fence?.tokenKey ?? stateKey,
            ...pass.map((sink) => parkedIdsKey(prefix, plan.source, sink)),
            ...jobKeys,
          ],
          [
            fields.cursor!,
            fields.seen_above!,
            fields.updated_at!,
            fence?.value ?? '',
            JSON.stringify(counted),
            JSON.stringify(lagArg),
            String(plan.slices.length),
            COUNTED_SLICE,
            String(fence?.ttlMs ?? 0),
          ],
        );
      }
      if ((fence && connections !== epoch) || nodeForKey(connection, knownKey) !== node)
        throw new FeedsyncError(
          `redis reconnected during the commit of ${plan.source}; retrying the page`,
          true,
        );
      const results = (await tx.exec()) as [Error | null, unknown][] | null;
      if (results === null) {
        // A watched key moved: the token counter (another replica took the lease), the known
        // sinks (a replay) or a catch-up sink's position. Nothing was written; planned again, the
        // checks before the MULTI say which it was.
        throw new CommitRaced(plan.source, await connection.hkeys(lagKey));
      }
      // Scripts gone from this server (a restart, SCRIPT FLUSH): BullMQ's adds met NOSCRIPT, so the
      // cursor script (sent as text, scripts.ts) found the jobs missing: nothing moved.
      if (await reconnectIfFlushed(client, results))
        throw new FeedsyncError(
          `redis lost its scripts during the commit of ${plan.source} (reconnecting); retrying the page`,
          true,
        );
      const failed = results.find(([err]) => err);
      if (catchUp && failed && /REFUSED/.test(errorMessage(failed[0])))
        throw new CatchUpRefused(plan.source, catchUp.sink, catchUp.generation, undefined);
      if (failed) {
        // An add failed (so the cursor script refused the cursor). Not for memory nor NOSCRIPT,
        // which fail every add alike; only a damaged key fails one alone, and then the adds that
        // got in are queued again with the page's retry: copies, never a loss.
        throw new FeedsyncError(
          `redis refused part of the page commit of ${plan.source}: ${errorMessage(failed[0])}`,
          true,
        );
      }
      // Written on the primary; with queue.min_replicas_acked not reported committed until the
      // replicas acknowledged it (WAIT on this connection, which ran the EXEC).
      await awaitReplicas(
        connection,
        minReplicas,
        catchUp
          ? `the catch-up commit of ${plan.source} (sink ${catchUp.sink})`
          : `the page commit of ${plan.source}`,
        { tag },
      );
      if (catchUp) return ((results.at(-1)?.[1] ?? []) as (string | number)[]).map(Number);
      stored.add(plan.source);
      return 'committed';
    } catch (err) {
      await unwatchKey(connection, knownKey).catch(() => undefined);
      throw err;
    }
  }

  /** One operation at a time on the connection (WATCH is per connection). */
  function serialized<T>(work: () => Promise<T>): Promise<T> {
    const run = chain.then(work);
    chain = run.catch(() => undefined);
    return run;
  }

  return {
    commit(plan, fence) {
      return serialized(() => commitOnce(plan, fence));
    },
    exclusive: serialized,
  };
}
