// The BullMQ producer: queues every change of a page for every sink whose filter it passes and
// saves the source's cursor in Redis, both in one transaction (page-commit.ts), fenced by the
// source's lease when the producer is given leases. One job per (page, sink, shard): a slice of the
// page's changes in feed order (slice.ts), with an id fresh for its commit.
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { QueueConfig } from '../../config/types.js';
import { withDeadline } from '../../backoff.js';
import { FeedsyncError, errorMessage } from '../../core/errors.js';
import type { Change } from '../../core/change.js';
import type { PipelineEvents } from '../../core/events.js';
import { passesFilter, wantsSource } from '../../sinks/filter.js';
import {
  PositionLost,
  type CatchUpCommit,
  type CatchUpResult,
  type ChangeQueue,
  type FeedPosition,
  type LaggingSink,
  type PageCommit,
} from '../queue.js';
import { CatchUpRefused, reportParked, type ProducerSink } from '../sink-positions.js';
import type { LeaseFence, RedisSourceLeases } from './lease.js';
import { readBacklogs } from './backlog.js';
import {
  assertSinkName,
  KeySpace,
  knownSinksKey,
  laggingKey,
  shardIndexes,
  shardOf,
  shardQueueName,
} from './names.js';
import {
  createPageCommitter,
  CommitRaced,
  LeaseFencedError,
  type LaggingEntry,
  type PagePlan,
  type PlannedSlice,
} from './page-commit.js';
import { createLegacyOutboxMigration } from './legacy-layout.js';
import { readLagging } from './positions-admin.js';
import { closeRedis, createRedisConnection, redisEndpoint, whenReady } from './redis.js';
import { inRounds, sliceJobOptions, type ChangeSlice } from './slice.js';
import { luaScript, runScript } from './scripts.js';

export interface BullmqProducerOptions {
  queue: QueueConfig;
  sinks: ProducerSink[];
  logger: Logger;
  /**
   * This replica's leases: a page of a source is committed only while its lease is held, and the
   * commit is fenced by it. Without leases commits are unfenced (one-off tools, tests).
   */
  leases?: Pick<RedisSourceLeases, 'fence' | 'markLost'>;
  /** Where the keys are (default: one Redis, queue.prefix). */
  keys?: KeySpace;
  /** Give up on a page after this long (default 10 s); see commitPage. */
  addTimeoutMs?: number;
  events?: PipelineEvents;
}

export type BullmqProducer = ChangeQueue & { close(): Promise<void> };

/** Backlogs and lagging sinks as last read: a second-old answer is plenty to decide parking. */
const VIEW_CACHE_MS = 1_000;

// Registers a sink for a source once. KEYS: lease key, known-sinks hash, lagging-sinks hash. ARGV:
// the lease value ('' unfenced), sink, its backfill entry ('' for none). 1 when it was new.
const REGISTER = luaScript(
  'register',
  `
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('FENCED the source lease is no longer ours; sink not registered')
end
if redis.call('HSETNX', KEYS[2], ARGV[2], 0) == 0 then return 0 end
if ARGV[3] ~= '' then
  redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
  redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
end
return 1`,
);

/** Per sink: undelivered changes, and which sinks are off each source's shared stream. */
interface View {
  backlog: Map<string, number>;
  lagging: Map<string, Set<string>>;
  at: number;
}
const DEFAULT_ADD_TIMEOUT_MS = 10_000;

export function createBullmqProducer(opts: BullmqProducerOptions): BullmqProducer {
  const config = opts.queue;
  for (const sink of opts.sinks) assertSinkName(sink.name);
  const connection = createRedisConnection(redisEndpoint(config), 'producer', opts.logger);
  const keys = opts.keys ?? KeySpace.single(config.prefix);
  const shards = shardIndexes(config.shards);
  const addTimeoutMs = opts.addTimeoutMs ?? DEFAULT_ADD_TIMEOUT_MS;
  // Commits WATCH the lease token, which needs a connection nothing else runs transactions on.
  const commitConnection = createRedisConnection(redisEndpoint(config), 'producer', opts.logger);
  const opened: Queue<ChangeSlice>[] = [];
  const openQueue = (tag: string, sink: string, shard: number, on: Redis) => {
    const queue = new Queue<ChangeSlice>(shardQueueName(sink, shard), { connection: on, prefix: tag });
    // Errors also surface as commitPage rejections; this only keeps them from being unhandled.
    queue.on('error', (err: Error) => opts.logger.debug({ sink, err: errorMessage(err) }, 'queue error'));
    opened.push(queue);
    return queue;
  };
  /** A sink's shard queues under one tag: for counting, and the same on the commit connection. */
  interface SinkQueues {
    queues: Queue<ChangeSlice>[];
    commitQueues: Queue<ChangeSlice>[];
  }
  const sinks = opts.sinks.map((sink) => {
    const byTag = new Map<string, SinkQueues>();
    return {
      ...sink,
      /** Its shard queues under `tag` (names.ts KeySpace), opened on first use (see queuesOpen). */
      queuesAt(tag: string): SinkQueues {
        let q = byTag.get(tag);
        if (!q) {
          q = {
            queues: shards.map((shard) => openQueue(tag, sink.name, shard, connection)),
            commitQueues: shards.map((shard) => openQueue(tag, sink.name, shard, commitConnection)),
          };
          byTag.set(tag, q);
        }
        return q;
      },
    };
  });
  const committer = createPageCommitter({
    connection: commitConnection,
    keys,
    jobOptions: sliceJobOptions(config),
    minReplicasAcked: config.min_replicas_acked,
  });
  const legacy = createLegacyOutboxMigration({
    connection: commitConnection,
    keys,
    jobOptions: sliceJobOptions(config),
    logger: opts.logger,
    exclusive: (work) => committer.exclusive(work),
    queuesOf: (source, sink) => sinks.find((s) => s.name === sink)?.queuesAt(keys.of(source)).commitQueues,
  });

  /**
   * Both connections ready, then every queue opened, once: they have no offline queue, and BullMQ
   * keeps a queue whose first command (its version check) was refused broken for good.
   */
  let opening: Promise<void> | undefined;
  function queuesOpen(): Promise<void> {
    opening ??= Promise.all([
      whenReady(connection, addTimeoutMs),
      whenReady(commitConnection, addTimeoutMs),
    ]).then((ready) => {
      if (!ready.every(Boolean)) {
        opening = undefined;
        throw noAnswer(addTimeoutMs);
      }
      for (const sink of sinks) for (const tag of keys.queueTags) sink.queuesAt(tag);
    });
    return opening;
  }

  let view: View | undefined;
  let viewInFlight: Promise<View> | undefined;
  /** Changes this producer queued per sink since the view being read was asked for. */
  let queuedSince = new Map<string, number>();
  let closed: Promise<void> | undefined;

  /**
   * Resolves with the changes queued per sink (every sink listed, 0 included). Throws, having
   * written nothing, when Redis fails or the lease of the source is no longer ours.
   */
  async function commitPage(commit: PageCommit): Promise<Record<string, number>> {
    if (closed)
      throw new FeedsyncError(`bullmq producer is closed; cannot queue page of ${commit.source}`, true);
    await queuesOpen().catch((err: unknown) => {
      throw cannotQueue(commit.source, commit.cursor, err);
    });
    // What an earlier release left in the source's outbox is older than this page.
    await legacy.migrate(commit.source, fenceOf(commit.source));
    // Bounded like the commit: BullMQ waits for the very first "ready" without limit.
    for (let attempt = 1; ; attempt++) {
      try {
        return await commitShared(commit, fenceOf(commit.source));
      } catch (err) {
        // A replay moved a sink between the plan and the commit: plan again with what Redis holds.
        if (!(err instanceof CommitRaced) || attempt >= 3) throw err;
        view?.lagging.set(commit.source, new Set(err.lagging));
      }
    }
  }

  async function commitShared(
    commit: PageCommit,
    fence: LeaseFence | undefined,
  ): Promise<Record<string, number>> {
    const known = await withDeadline(currentView(commit.source), addTimeoutMs).catch((err: unknown) => {
      throw cannotQueue(commit.source, commit.cursor, err);
    });
    if (!known) throw cannotQueue(commit.source, commit.cursor, noAnswer(addTimeoutMs));
    const lagging = known.lagging.get(commit.source) ?? new Set<string>();
    // The cached figures only over-estimate (deliveries since the last read are not in them): a
    // sink that looks full is parked only if Redis says so now.
    const full = (sink: (typeof sinks)[number]) =>
      !lagging.has(sink.name) && backlogOf(sink.name) >= (sink.maxBacklog ?? Infinity);
    if (sinks.some(full)) await withDeadline(refreshBacklogs(), addTimeoutMs).catch(() => undefined);
    const slices: PlannedSlice[] = [];
    const queued: Record<string, number> = {};
    const park: string[] = [];
    const passes = new Map<string, number[]>();
    for (const sink of sinks) {
      queued[sink.name] = 0;
      const wanted = commit.changes.filter((change) => passesFilter(sink.filter, change));
      if (!wanted.length) continue;
      // Parked (now, or already): not queued for it; its catch-up reads the page again.
      const parks = full(sink);
      if (lagging.has(sink.name) || parks) {
        if (parks) park.push(sink.name);
        passes.set(
          sink.name,
          wanted.map((c) => c.event_id),
        );
        continue;
      }
      slices.push(...planSlices(sink, commit.source, wanted));
      queued[sink.name] = wanted.length;
    }
    const plan: PagePlan = {
      source: commit.source,
      slices,
      queued,
      cursor: commit.cursor,
      seenAbove: commit.seenAbove,
      laggingAssumed: [...lagging],
      ...(commit.from ? { from: commit.from } : {}),
      ...(passes.size ? { lagging: { park, passes } } : {}),
    };
    // With the offline queue off, a dropped connection fails at once; but BullMQ waits for the very
    // first "ready" without limit, so a Redis that was never reachable would hang the poller.
    const outcome = await commitPlan(plan, fence);
    for (const name of park) {
      lagging.add(name);
      reportParked(opts.events, opts.logger, commit.source, name);
    }
    if (park.length) known.lagging.set(commit.source, lagging);
    if (outcome === 'committed') countQueued(queued);
    return queued;
  }

  /**
   * The slices of one sink's changes, grouped by shard: in rounds (slice.ts inRounds), or in feed
   * order when one shard holds the whole feed.
   */
  function planSlices(sink: (typeof sinks)[number], source: string, changes: Change[]): PlannedSlice[] {
    const queues = sink.queuesAt(keys.of(source)).commitQueues;
    const perShard = new Map<number, Change[]>();
    for (const change of changes) {
      const shard = shardOf(change, queues.length);
      const list = perShard.get(shard) ?? [];
      list.push(change);
      perShard.set(shard, list);
    }
    return [...perShard].map(([shard, list]) => ({
      sink: sink.name,
      shard,
      queue: queues[shard]!,
      changes: queues.length > 1 ? inRounds(list) : list,
    }));
  }

  /**
   * Commits a plan within addTimeoutMs; throws, having written nothing, on any failure. A commit
   * still running past it lands whole, and the retry of the page finds its cursor and adds nothing.
   */
  async function commitPlan(plan: PagePlan, fence: LeaseFence | undefined) {
    const result = await withDeadline(
      committer.commit(plan, fence).then(
        (value) => ({ ok: true as const, value }),
        (reason: unknown) => ({ ok: false as const, reason }),
      ),
      addTimeoutMs,
    );
    if (!result || !result.ok) {
      const reason = result ? result.reason : noAnswer(addTimeoutMs);
      if (reason instanceof LeaseFencedError) {
        opts.leases?.markLost(plan.source, reason.message);
        throw reason;
      }
      if (reason instanceof CatchUpRefused || reason instanceof CommitRaced || reason instanceof PositionLost)
        throw reason;
      // A connection that answers nothing (a socket dead without a reset, a Redis that froze and
      // restarted behind it) is never dropped by ioredis on its own: every later commit would time
      // out on it too. Drop it; ioredis reconnects, and the page is retried on a fresh socket.
      if (!result || /timed out/i.test(errorMessage(reason))) commitConnection.disconnect(true);
      // Nothing was written (or a late write lands whole; the retry then finds the cursor there).
      throw cannotQueue(plan.source, plan.cursor, reason);
    }
    return result.value;
  }

  /**
   * The source's lease as this replica holds it, asked before every try: a holder whose own clock
   * says the lease ran out (rule.ts) starts nothing more, even where Redis would still restore it.
   */
  function fenceOf(source: string): LeaseFence | undefined {
    const fence = opts.leases?.fence(source);
    if (opts.leases && !fence) throw new LeaseFencedError(source, 'this replica does not hold the lease');
    return fence;
  }

  /** Counted in at once (the next read replaces them with Redis's figures): parking needs no round trip. */
  function countQueued(queued: Record<string, number>): void {
    for (const [sink, n] of Object.entries(queued)) {
      if (!n) continue;
      queuedSince.set(sink, (queuedSince.get(sink) ?? 0) + n);
      view?.backlog.set(sink, (view.backlog.get(sink) ?? 0) + n);
    }
  }

  function backlogOf(sink: string): number {
    return view?.backlog.get(sink) ?? 0;
  }

  async function commitCatchUp(commit: CatchUpCommit): Promise<CatchUpResult> {
    await queuesOpen();
    await legacy.migrate(commit.source, fenceOf(commit.source));
    const sink = sinks.find((s) => s.name === commit.sink);
    const wanted = sink ? commit.changes.filter((change) => passesFilter(sink.filter, change)) : [];
    const plan: PagePlan = {
      source: commit.source,
      slices: sink ? planSlices(sink, commit.source, wanted) : [],
      queued: { [commit.sink]: wanted.length },
      cursor: commit.cursor,
      seenAbove: commit.seenAbove,
      catchUp: {
        sink: commit.sink,
        generation: commit.generation,
        entry: {
          cursor: commit.cursor,
          seenAbove: commit.seenAbove,
          reason: commit.reason,
          since: commit.since,
          eventAt: commit.eventAt,
        },
        eventIds: commit.eventIds,
        join: commit.join,
        from: commit.from,
        shared: commit.shared,
      },
    };
    let lost: Awaited<ReturnType<typeof commitPlan>> | undefined;
    for (let attempt = 1; lost === undefined; attempt++) {
      try {
        lost = await commitPlan(plan, fenceOf(commit.source));
      } catch (err) {
        // Raced a renewal of the lease (WATCHed): nothing written, the page is still good.
        if (!(err instanceof CommitRaced) || attempt >= 3) throw err;
      }
    }
    countQueued(plan.queued);
    if (commit.join) view?.lagging.get(commit.source)?.delete(commit.sink);
    return { queued: wanted.length, lost: Array.isArray(lost) ? lost : [] };
  }

  async function laggingSinks(source: string): Promise<LaggingSink[]> {
    const client = await queueClient();
    const lagging = await readLagging(client, keys, source, opts.sinks);
    // The poller asks between its commits: what it reads is what its next commit must honour.
    view?.lagging.set(source, new Set(lagging.map((l) => l.sink)));
    return lagging;
  }

  async function registerSinks(
    source: string,
    service: string,
    at: FeedPosition | undefined,
  ): Promise<string[]> {
    const fence = opts.leases?.fence(source);
    const client = await queueClient();
    const backfilled: string[] = [];
    for (const sink of sinks) {
      if (!wantsSource(sink.filter, source, service)) continue;
      const start = sink.startFrom === 'earliest' ? 0 : sink.startFrom;
      const backfill = at !== undefined && start !== undefined && start < at.cursor;
      const entry: LaggingEntry | undefined = backfill
        ? { cursor: start, seenAbove: [], reason: 'backfill', since: Date.now(), eventAt: 0 }
        : undefined;
      const added = await runScript(
        client,
        REGISTER,
        [
          fence?.leaseKey ?? knownSinksKey(keys, source),
          knownSinksKey(keys, source),
          laggingKey(keys, source),
        ],
        [fence?.value ?? '', sink.name, entry ? JSON.stringify(entry) : ''],
      );
      if (Number(added) === 1 && entry) backfilled.push(sink.name);
    }
    if (backfilled.length) view?.lagging.delete(source);
    return backfilled;
  }

  /** A queue's client: it waits for the first connection, as the commits do. */
  async function queueClient(): Promise<Redis> {
    await queuesOpen();
    const first = sinks[0]?.queuesAt(keys.queueTags[0]!).queues[0];
    return first ? ((await first.backend.client) as unknown as Redis) : connection;
  }

  /**
   * Asked before every commit. Backlogs are refreshed in the background once a second old (only
   * the very first call waits). Which sinks lag is read with the source's first commit and then
   * kept here: only this process (the source's lease holder) parks and rejoins sinks, and its
   * poller re-reads the list (laggingSinks, between its commits) for what others change (replay).
   */
  async function currentView(source: string): Promise<View> {
    const current = await backlogView();
    if (!current.lagging.has(source)) {
      const client = await queueClient();
      current.lagging.set(source, new Set(await client.hkeys(laggingKey(keys, source))));
    }
    return current;
  }

  /** Reads the backlogs now (a read already under way may predate the deliveries since). */
  async function refreshBacklogs(): Promise<void> {
    if (viewInFlight) await viewInFlight.catch(() => undefined);
    if (view) view.at = 0;
    await backlogView();
    await viewInFlight;
  }

  async function backlogView(): Promise<View> {
    if (!view || Date.now() - view.at >= VIEW_CACHE_MS) {
      const since = queuedSince;
      queuedSince = new Map();
      viewInFlight ??= queueClient()
        .then((client) =>
          readBacklogs(
            client,
            keys,
            sinks.map((s) => s.name),
          ),
        )
        .then((backlog) => {
          // Pages committed while Redis was being read may be missing from its figures: add them
          // (possibly twice; over-estimating is the safe side until the next read).
          for (const [sink, n] of queuedSince) backlog.set(sink, (backlog.get(sink) ?? 0) + n);
          view = { backlog, lagging: view?.lagging ?? new Map(), at: Date.now() };
          return view;
        })
        .catch((err: unknown) => {
          for (const [sink, n] of since) queuedSince.set(sink, (queuedSince.get(sink) ?? 0) + n);
          throw err;
        })
        .finally(() => {
          viewInFlight = undefined;
        });
      // A failed background read keeps the last view; the next call tries again.
      viewInFlight.catch(() => undefined);
    }
    return view ?? viewInFlight!;
  }

  function close(): Promise<void> {
    closed ??= (async () => {
      await Promise.allSettled(opened.map((q) => q.close()));
      // Together: on a frozen Redis each close waits out its own QUIT.
      await Promise.allSettled([commitConnection, connection].map(closeRedis));
    })();
    return closed;
  }

  return { commitPage, commitCatchUp, laggingSinks, registerSinks, close };
}

function noAnswer(ms: number): Error {
  return new Error(`no answer from redis within ${ms} ms`);
}

function cannotQueue(source: string, cursor: number, reason: unknown): FeedsyncError {
  return new FeedsyncError(
    `cannot queue page of source ${source} (cursor ${cursor}) in Redis: ${errorMessage(reason)}`,
    true,
    { cause: reason },
  );
}
