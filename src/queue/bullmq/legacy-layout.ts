// The Redis Cluster layout of earlier releases, met once on upgrade. There every sink shard had a
// hash tag of its own (`{prefix:sink:<sink>.<shard>}`) and a source's pages reached those queues
// through the source's page outbox. Now a source's shard queues share the source's tag (names.ts).
// What an earlier release may have left, and what becomes of it:
// - pages still in a source's outbox: its lease holder moves them into the source's own shard
//   queues, once, before its first commit or catch-up (createLegacyOutboxMigration). Pages the outbox kept
//   after forwarding them (marked in the old queue's slot) are already in the old queues: skipped.
// - slices in the old per-shard queues: `work` delivers them first and starts a sink's new queues
//   only once every old queue of that sink is empty (legacyQueuesPending, delivery.ts), so
//   per-subject order holds across the two layouts.
// Both say so in the log. Every process of the earlier release must be stopped first, and
// `queue.shards` kept as it was (docs/scaled-mode.md, "Upgrading a cluster").
import { Job, Queue } from 'bullmq';
import type { ChainableCommander, Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { Change } from '../../core/change.js';
import { FeedsyncError, errorMessage } from '../../core/errors.js';
import type { LeaseFence } from './lease.js';
import { backlogKey, legacyOutboxKey, shardOf, type KeySpace } from './names.js';
import { unwatchKey } from './redis.js';
import { commitToken, COUNTED_SLICE, sliceJobId, type ChangeSlice } from './slice.js';

interface LegacyEntry {
  id: string;
  slices: { sink: string; shard: number; changes: Change[] }[];
}

export interface LegacyOutboxMigration {
  /** Moves what `source`'s outbox holds into its shard queues (a cluster, once per source). */
  migrate(source: string, fence: LeaseFence | undefined): Promise<void>;
}

export function createLegacyOutboxMigration(opts: {
  connection: Redis;
  keys: KeySpace;
  jobOptions: Record<string, unknown>;
  logger: Logger;
  /** Runs alone on `connection` (a WATCH is per connection): the page committer's serialisation. */
  exclusive<T>(work: () => Promise<T>): Promise<T>;
  /** The source's shard queues of `sink` on `connection` (undefined: the config has no such sink). */
  queuesOf(source: string, sink: string): Queue<ChangeSlice>[] | undefined;
}): LegacyOutboxMigration {
  const { connection, keys } = opts;
  const done = new Set<string>();

  async function migrate(source: string, fence: LeaseFence | undefined): Promise<void> {
    if (!keys.perSource || done.has(source)) return;
    await opts.exclusive(() => migrateOnce(source, fence));
  }

  async function migrateOnce(source: string, fence: LeaseFence | undefined): Promise<void> {
    const outbox = legacyOutboxKey(keys, source);
    const raw = await connection.lrange(outbox, 0, -1);
    if (raw.length === 0) {
      done.add(source);
      return;
    }
    const entries = raw.map((text) => parseEntry(source, text));
    // Per sink, the changes of the pages no old queue has yet, in outbox (feed) order.
    const pending = new Map<string, Change[]>();
    let skipped = 0;
    for (const entry of entries)
      for (const slice of entry.slices) {
        const oldTag = keys.legacyQueueTags(slice.sink)[slice.shard];
        const forwarded = oldTag ? await connection.zscore(`${oldTag}:forwarded:${source}`, entry.id) : null;
        if (forwarded !== null) {
          skipped++;
          continue;
        }
        pending.set(slice.sink, [...(pending.get(slice.sink) ?? []), ...slice.changes]);
      }
    const tx = (await clientFor(source, pending)).multi() as unknown as ChainableCommander;
    const adds: Promise<unknown>[] = [];
    const commit = commitToken();
    let slices = 0;
    for (const [sink, changes] of pending) {
      const queues = opts.queuesOf(source, sink)!;
      const perShard = new Map<number, Change[]>();
      for (const change of changes) {
        const shard = shardOf(change, queues.length);
        perShard.set(shard, [...(perShard.get(shard) ?? []), change]);
      }
      for (const [shard, list] of perShard) {
        const jobId = sliceJobId(list, commit);
        adds.push(
          new Job<ChangeSlice>(
            queues[shard]!,
            COUNTED_SLICE,
            { changes: list },
            { ...opts.jobOptions, jobId },
            jobId,
          ).addJob(tx as never),
        );
        slices++;
      }
      tx.hincrby(backlogKey(keys.of(source)), sink, changes.length);
    }
    await Promise.all(adds);
    tx.del(outbox);
    // Under the source's lease, in its slot: WATCH it; a holder that lost it writes nothing.
    if (fence) {
      await connection.watch(fence.leaseKey);
      if ((await connection.get(fence.leaseKey)) !== fence.value) {
        await unwatchKey(connection, fence.leaseKey);
        throw new FeedsyncError(`source ${source}: the lease was lost before its old outbox was moved`, true);
      }
    }
    const results = (await tx.exec()) as [Error | null, unknown][] | null;
    if (results === null)
      throw new FeedsyncError(
        `source ${source}: the lease moved while its old outbox was moved; retrying`,
        true,
      );
    const failed = results.find(([err]) => err);
    if (failed)
      throw new FeedsyncError(
        `source ${source}: cannot move the outbox of an earlier release: ${errorMessage(failed[0])}`,
        true,
      );
    done.add(source);
    opts.logger.info(
      { source, pages: entries.length, slices, alreadyForwarded: skipped },
      `moved ${entries.length} pages of source ${source} from the page outbox of an earlier release into its shard queues`,
    );
  }

  /** The BullMQ-aware client of the source's queues; refuses pages for a sink the config lacks. */
  async function clientFor(source: string, pending: Map<string, Change[]>): Promise<Redis> {
    let client: Redis | undefined;
    for (const sink of pending.keys()) {
      const queues = opts.queuesOf(source, sink);
      if (!queues)
        throw new FeedsyncError(
          `the page outbox of source ${source} (left by an earlier release) holds pages for sink ${sink}, ` +
            'which the config no longer has: start with that sink configured until it has drained',
          false,
        );
      client ??= (await queues[0]!.backend.client) as unknown as Redis;
    }
    return client ?? connection;
  }

  return { migrate };
}

function parseEntry(source: string, text: string): LegacyEntry {
  const space = text.indexOf(' ');
  try {
    const entry = JSON.parse(text.slice(space + 1)) as LegacyEntry;
    if (typeof entry.id === 'string' && Array.isArray(entry.slices)) return entry;
  } catch {
    // reported below
  }
  throw new FeedsyncError(`the page outbox of ${source} holds an entry feedsync cannot read`, false);
}

/**
 * The sink's queues of the earlier cluster layout that still hold slices (waiting, active, delayed,
 * prioritized or paused): `work` delivers these first (delivery.ts).
 */
export async function legacyQueuesPending(
  keys: KeySpace,
  sink: string,
  open: (tag: string, shard: number) => Queue<ChangeSlice>,
): Promise<{ tag: string; shard: number; queue: Queue<ChangeSlice> }[]> {
  const out: { tag: string; shard: number; queue: Queue<ChangeSlice> }[] = [];
  const tags = keys.legacyQueueTags(sink);
  for (const [shard, tag] of tags.entries()) {
    const queue = open(tag, shard);
    if ((await queuedIn(queue)) > 0) out.push({ tag, shard, queue });
    else await queue.close();
  }
  return out;
}

/** Slices a queue still holds to deliver. */
export async function queuedIn(queue: Queue<ChangeSlice>): Promise<number> {
  const counts = await queue.getJobCounts('waiting', 'active', 'delayed', 'prioritized');
  return Object.values(counts).reduce((a, b) => a + b, 0);
}
