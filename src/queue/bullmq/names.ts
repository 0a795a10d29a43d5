// How feedsync lays out its BullMQ queues and job ids in Redis. Producers, workers, admin and the
// source leases must agree on every name here, so it all lives in one file.
//
// Layout, for config `prefix: feedsync`, sink `hook`, shards 4, on one Redis (standalone or Sentinel):
//   BullMQ prefix   `{feedsync}`        the braces are a Redis Cluster hash tag: every key of
//                                       feedsync lands in one slot, as BullMQ's docs require
// On a Redis Cluster the tags split by source (KeySpace below): `{feedsync:scheduling}` holds
// everything of that source — its state, lease, positions, and its own shard queues with their
// shard leases and backlog; `{feedsync}` keeps what no source owns (pollers, dead-letter queues).
// The names below are written for one Redis; on a cluster read `{feedsync}` as the source's tag.
//   shard queues    `hook.0` … `hook.3` one queue per sink and shard (keys `{feedsync}:hook.2:wait`, …)
//                                       whose jobs are slices: the changes of one page that map to
//                                       that shard, data `{ changes: [...] }` (see slice.ts)
//   slice job id    `scheduling~101+scheduling~149+<commit>`  the first and last change keys of
//                                       the slice, each with `:` (forbidden in BullMQ ids) as `~`,
//                                       and a token fresh for every commit (slice.ts)
//   retried slice   `scheduling~123457+scheduling~123457+retry-<token>`  re-queued by `dlq retry`
//   dead queue      `hook.dead`         one per sink, never consumed: each job (waiting for ever)
//                                       is ONE dead-lettered change, job id `scheduling~123457`
//   source state    `{feedsync}:source:scheduling`  hash: cursor, seen_above and poll status
//   source lease    `{feedsync}:lease:scheduling`   `<token> <owner>`, expires unless renewed
//   lease token     `{feedsync}:lease-token:scheduling`  the last fencing token (src/lease/redis-scripts.ts NEXT_TOKEN)
//   shard lease     `{feedsync}:shard-lease:hook.2` `<token> <owner>` of the `work` process serving the shard
//   shard token     `{feedsync}:shard-lease-token:hook.2`  the shard lease's last fencing token
//   backlog         `{feedsync}:backlog`            hash: per sink, changes queued and not yet delivered
//   pollers         `{feedsync}:pollers`            zset of live poll replicas, score = expiry
//   workers         `{feedsync}:workers`            zset of live work processes, score = expiry
//   commit stats    `{feedsync}:commit-stats`       hash: commits ('pages'), slice jobs and changes queued
//   lagging sinks   `{feedsync}:lagging:scheduling` hash: sink → its own position (JSON) while it
//                                       is off the source's shared stream (sink-positions.ts)
//   known sinks     `{feedsync}:sinks:scheduling`   hash: sink → generation (bumped by park/replay)
//   parked ids      `{feedsync}:parked:scheduling:hook`  set: ids the shared poll passed for it
//   lost upstream   `{feedsync}:lost:scheduling`    hash: sink → {count, ids, at} of ids its catch-up never saw
//
// Queue names cannot collide although sink names may contain `.`: a shard queue's name always ends
// in `.` + decimal digits and a dead queue's in `.dead`, so no name is both; and stripping that
// fixed suffix gives back the sink name, so two sinks never share a queue.
import { FeedsyncError } from '../../core/errors.js';
import type { Change } from '../../core/change.js';

export function bullPrefix(prefix: string): string {
  return `{${prefix}}`;
}

/**
 * Which hash tag each key gets. One Redis: one tag for everything (the layout every earlier
 * version wrote, so nothing moves on upgrade). Redis Cluster: one tag per source, for everything
 * of that source: its state, lease, positions AND its shard queues, so a page commit is one MULTI
 * in one slot, as on one Redis. A cluster spreads load by source; one source's pages and
 * deliveries live on one primary.
 */
export class KeySpace {
  private constructor(
    readonly prefix: string,
    /** Redis Cluster: a tag per source, shard queues included. */
    readonly perSource: boolean,
    private readonly sources: readonly string[],
    private readonly shards: number,
  ) {}

  static single(prefix: string): KeySpace {
    return new KeySpace(prefix, false, [], 1);
  }

  static cluster(prefix: string, sources: readonly string[], shards: number): KeySpace {
    return new KeySpace(prefix, true, [...sources], shardIndexes(shards).length);
  }

  /** The tag of everything about `source`. */
  of(source: string): string {
    return this.perSource ? `{${this.prefix}:${source}}` : bullPrefix(this.prefix);
  }

  /** The tag of keys no source owns: poll replicas, dead-letter queues. */
  get shared(): string {
    return bullPrefix(this.prefix);
  }

  /** Every tag holding shard queues: one on one Redis, one per configured source on a cluster. */
  get queueTags(): string[] {
    return this.perSource ? this.sources.map((source) => this.of(source)) : [this.shared];
  }

  /**
   * The cluster layout of earlier releases: a tag per sink shard (`{prefix:sink:<sink>.<shard>}`),
   * fed from a per-source page outbox. A new release drains those queues before it delivers the
   * same sink shard from the new ones (delivery.ts, legacy-layout.ts). None on one Redis.
   */
  legacyQueueTags(sink: string): string[] {
    if (!this.perSource) return [];
    return shardIndexes(this.shards).map((shard) => `{${this.prefix}:sink:${shardQueueName(sink, shard)}}`);
  }
}

/** A KeySpace, or a bare queue.prefix meaning one Redis (tests and tools). */
export type Keys = KeySpace | string;

export function keySpace(keys: Keys): KeySpace {
  return typeof keys === 'string' ? KeySpace.single(keys) : keys;
}

function tagOf(keys: Keys, source: string): string {
  return keySpace(keys).of(source);
}

/** Sink names become part of queue names; BullMQ rejects `:` there. */
export function assertSinkName(sink: string): void {
  if (sink === '' || sink.includes(':')) {
    throw new FeedsyncError(
      `sink "${sink}": name must be non-empty and must not contain ":" (queue.driver bullmq)`,
      false,
    );
  }
}

export function shardQueueName(sink: string, shard: number): string {
  return `${sink}.${shard}`;
}

/** The sink's dead-letter queue: no worker consumes it, so its jobs stay in `wait` until `dlq`. */
export function deadQueueName(sink: string): string {
  return `${sink}.dead`;
}

export function shardIndexes(shards: number): number[] {
  return Array.from({ length: Math.max(1, Math.floor(shards)) }, (_, i) => i);
}

/**
 * `scheduling:123457` → `scheduling~123457`. Source names contain only [A-Za-z0-9_.-], so `~` can
 * only come from this encoding and the id decodes back to the key unambiguously.
 */
export function jobIdForKey(key: string): string {
  return key.replaceAll(':', '~');
}

export function keyForJobId(jobId: string): string {
  return jobId.replaceAll('~', ':');
}

/** 32-bit FNV-1a over the UTF-8 bytes: stable across processes and versions (unlike a seeded hash). */
export function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (const byte of Buffer.from(text, 'utf8')) {
    hash ^= byte;
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash >>> 0;
}

/**
 * The shard of a change: every change of one subject maps to the same shard, which is what keeps
 * per-subject order. Changes without a subject URL are spread by key.
 */
export function shardOf(change: Pick<Change, 'subject_url' | 'key'>, shards: number): number {
  const n = Math.max(1, Math.floor(shards));
  return fnv1a(change.subject_url ?? change.key) % n;
}

/** A source's cursor, seen_above and poll status (scaled mode keeps no state on disk). */
export function sourceStateKey(keys: Keys, source: string): string {
  return `${tagOf(keys, source)}:source:${source}`;
}

export function leaseKey(keys: Keys, source: string): string {
  return `${tagOf(keys, source)}:lease:${source}`;
}

/** Never expires: a token is never handed out twice, even after the lease key expired. */
export function leaseTokenKey(keys: Keys, source: string): string {
  return `${tagOf(keys, source)}:lease-token:${source}`;
}

/** The lease of one sink shard's deliveries (shard-lease.ts): `<token> <owner>`, expires unless renewed. */
export function shardLeaseKey(tag: string, sink: string, shard: number): string {
  return `${tag}:shard-lease:${sink}.${shard}`;
}

/** The last fencing token of the shard lease (src/lease/redis-scripts.ts NEXT_TOKEN). */
export function shardLeaseTokenKey(tag: string, sink: string, shard: number): string {
  return `${tag}:shard-lease-token:${sink}.${shard}`;
}

/** Hash: per sink, the changes queued and not yet delivered or dead-lettered (exact; see page-commit.ts). */
export function backlogKey(tag: string): string {
  return `${tag}:backlog`;
}

export function pollersKey(keys: Keys): string {
  return `${keySpace(keys).shared}:pollers`;
}

/** Sorted set of live `work` processes (leases.ts): the shards' leases spread over them. */
export function workersKey(keys: Keys): string {
  return `${keySpace(keys).shared}:workers`;
}

export function commitStatsKey(tag: string): string {
  return `${tag}:commit-stats`;
}

/** Hash: sink → its own position (JSON) while it is off the source's shared stream. */
export function laggingKey(keys: Keys, source: string): string {
  return `${tagOf(keys, source)}:lagging:${source}`;
}

/** Hash: sink → generation; a sink is registered for the source once it has a field here. */
export function knownSinksKey(keys: Keys, source: string): string {
  return `${tagOf(keys, source)}:sinks:${source}`;
}

/** Set: the ids the shared poll passed for a parked sink. */
export function parkedIdsKey(keys: Keys, source: string, sink: string): string {
  return `${tagOf(keys, source)}:parked:${source}:${sink}`;
}

/**
 * List (the cluster layout of earlier releases): pages committed and not yet forwarded to their shard queues,
 * each `<seq> <entry JSON>`, oldest first. Read once, by legacy-layout.ts, and emptied.
 */
export function legacyOutboxKey(keys: Keys, source: string): string {
  return `${tagOf(keys, source)}:outbox:${source}`;
}

/** Hash: sink → what its catch-ups found lost upstream (JSON {count, ids, at}). */
export function lostKey(keys: Keys, source: string): string {
  return `${tagOf(keys, source)}:lost:${source}`;
}
