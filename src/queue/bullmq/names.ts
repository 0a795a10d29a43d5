// How feedsync lays out its BullMQ queues and job ids in Redis. Producers, workers, admin and the
// source leases must agree on every name here, so it all lives in one file.
//
// Layout, for config `prefix: feedsync`, sink `hook`, shards 4:
//   BullMQ prefix   `{feedsync}`        the braces are a Redis Cluster hash tag: every key of
//                                       feedsync lands in one slot, as BullMQ's docs require
//   shard queues    `hook.0` … `hook.3` one queue per sink and shard (keys `{feedsync}:hook.2:wait`, …)
//                                       whose jobs are slices: the changes of one page that map to
//                                       that shard, data `{ changes: [...] }` (see slice.ts)
//   slice job id    `scheduling~101+scheduling~149`  the first and last change keys of the slice,
//                                       each with `:` (forbidden in BullMQ ids) as `~`
//   retried slice   `scheduling~123457+retry-<uuid>`  a one-change slice re-queued by `dlq retry`
//   dead queue      `hook.dead`         one per sink, never consumed: each job (waiting for ever)
//                                       is ONE dead-lettered change, job id `scheduling~123457`
//   source state    `{feedsync}:source:scheduling`  hash: cursor, seen_above and poll status
//   source lease    `{feedsync}:lease:scheduling`   `<token> <owner>`, expires unless renewed
//   lease token     `{feedsync}:lease-token:scheduling`  counter, +1 per acquisition (fencing)
//   shard lease     `{feedsync}:shard-lease:hook.2` `<token> <owner>` of the worker delivering a slice
//   shard token     `{feedsync}:shard-lease-token:hook.2`  counter, +1 per acquisition (fencing)
//   backlog         `{feedsync}:backlog`            hash: per sink, changes queued and not yet delivered
//   pollers         `{feedsync}:pollers`            zset of live poll replicas, score = expiry
//   commit stats    `{feedsync}:commit-stats`       hash: pages and slice jobs committed
//   lagging sinks   `{feedsync}:lagging:scheduling` hash: sink → its own position (JSON) while it
//                                       is off the source's shared stream (sink-positions.ts)
//   known sinks     `{feedsync}:sinks:scheduling`   hash: sink → generation (bumped by park/replay)
//   parked ids      `{feedsync}:parked:scheduling:hook`  set: ids the shared poll passed for it
//   catch-up slice  `<slice id>@c<generation>`      a slice queued by a sink's own catch-up
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
export function sourceStateKey(prefix: string, source: string): string {
  return `${bullPrefix(prefix)}:source:${source}`;
}

export function leaseKey(prefix: string, source: string): string {
  return `${bullPrefix(prefix)}:lease:${source}`;
}

/** Never expires: a token is never handed out twice, even after the lease key expired. */
export function leaseTokenKey(prefix: string, source: string): string {
  return `${bullPrefix(prefix)}:lease-token:${source}`;
}

/** The lease of one sink shard's deliveries (shard-lease.ts): `<token> <owner>`, expires unless renewed. */
export function shardLeaseKey(prefix: string, sink: string, shard: number): string {
  return `${bullPrefix(prefix)}:shard-lease:${sink}.${shard}`;
}

/** Counter, +1 per acquisition of the shard lease (its fencing token). */
export function shardLeaseTokenKey(prefix: string, sink: string, shard: number): string {
  return `${bullPrefix(prefix)}:shard-lease-token:${sink}.${shard}`;
}

/** Hash: per sink, the changes queued and not yet delivered or dead-lettered (exact; see page-commit.ts). */
export function backlogKey(prefix: string): string {
  return `${bullPrefix(prefix)}:backlog`;
}

export function pollersKey(prefix: string): string {
  return `${bullPrefix(prefix)}:pollers`;
}

export function commitStatsKey(prefix: string): string {
  return `${bullPrefix(prefix)}:commit-stats`;
}

/** Hash: sink → its own position (JSON) while it is off the source's shared stream. */
export function laggingKey(prefix: string, source: string): string {
  return `${bullPrefix(prefix)}:lagging:${source}`;
}

/** Hash: sink → generation; a sink is registered for the source once it has a field here. */
export function knownSinksKey(prefix: string, source: string): string {
  return `${bullPrefix(prefix)}:sinks:${source}`;
}

/** Set: the ids the shared poll passed for a parked sink. */
export function parkedIdsKey(prefix: string, source: string, sink: string): string {
  return `${bullPrefix(prefix)}:parked:${source}:${sink}`;
}

/** Hash: sink → what its catch-ups found lost upstream (JSON {count, ids, at}). */
export function lostKey(prefix: string, source: string): string {
  return `${bullPrefix(prefix)}:lost:${source}`;
}
