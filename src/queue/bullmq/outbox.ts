// Pages on a Redis Cluster. A source's cursor and its sinks' shard queues hash to different slots
// there (names.ts, KeySpace), and one MULTI cannot span slots. So the page commit
// (page-commit.ts) writes the page's slices into the source's OUTBOX, in the same transaction as
// the cursor, and the source's lease holder then forwards each entry to its shard queues and
// drops it once every queue has it (with queue.min_replicas_acked: once their replicas have it
// too). A crash anywhere in between leaves the entry in the outbox, and the next holder forwards it.
//
// Forwarding is idempotent: a queue's slot keeps a mark per outbox entry forwarded there (a zset,
// score = the entry's sequence number), written in the same MULTI as the slice jobs and checked
// under WATCH, so an entry lands in a queue once however often it is forwarded. Marks of dropped
// entries are pruned on the way, but only those of drops DROP_AFTER_MS old: a drop is a write on the
// source's primary, and one that primary loses (a host crash before the fsync) brings its entries
// back; their marks must still be there, or they would be queued again behind newer pages.
//
// Order: a holder forwards entries oldest first, all of one queue's slices in one MULTI, so each
// queue gets a source's slices in feed order. A holder that lost its lease while frozen must not
// forward what it still holds in memory (the entry may be dropped and its marks pruned: a copy):
// each queue's slot keeps the highest source-lease token that forwarded there, and a lower one is
// refused, which also marks this process's lease lost.
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Job, type Queue } from 'bullmq';
import type { ChainableCommander, Redis } from 'ioredis';
import { FeedsyncError, errorMessage } from '../../core/errors.js';
import type { LeaseFence } from './lease.js';
import { backlogKey, forwardedKey, forwardTokenKey, outboxKey, type KeySpace } from './names.js';
import { nodeForKey, unwatchKey } from './redis.js';
import { awaitReplicas } from './replication.js';
import type { ChangeSlice } from './slice.js';

/** One slice of an outbox entry: the changes of the page for one sink shard. */
export interface OutboxSlice {
  sink: string;
  shard: number;
  jobId: string;
  changes: ChangeSlice['changes'];
}

interface Entry {
  /** Unique: a failover that loses the outbox's tail makes its sequence numbers be given again. */
  id: string;
  /**
   * When the page was committed (ms): the timestamp of the jobs forwarded from it, so a forward
   * can tell the jobs of this entry from those of an earlier commit of the same page (same ids).
   * Absent in entries of earlier versions.
   */
  at?: number;
  slices: OutboxSlice[];
}

/** Entry times, strictly increasing in a process: two commits of one page never share one. */
let lastEntryAt = 0;

/** The text of a new outbox entry; the commit script prefixes it with its sequence number. */
export function outboxEntry(slices: OutboxSlice[]): string {
  lastEntryAt = Math.max(Date.now(), lastEntryAt + 1);
  return JSON.stringify({ id: randomUUID(), at: lastEntryAt, slices } satisfies Entry);
}

/** Entries read from the outbox at a time. */
const BATCH = 20;

// Drops the forwarded entries if the lease is still ours and the outbox still starts with them.
// KEYS: outbox, lease key (the outbox when unfenced). ARGV: lease value ('' unfenced), the first
// entry as read, how many. 1 dropped, 0 the lease is not ours, 2 the outbox's head changed.
const DROP = `
if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
if redis.call('LINDEX', KEYS[1], 0) ~= ARGV[2] then return 2 end
redis.call('LTRIM', KEYS[1], tonumber(ARGV[3]), -1)
return 1`;

// Runs after the adds in the forwarding MULTI (which does not roll back a failed command): marks
// the entries forwarded only if every job is there. A job counts in the sink's backlog only if it
// was added for this entry (its timestamp is the entry's): an add is a no-op for a job id the queue
// still holds (a page read again after the source's primary lost it, under a new entry), and the
// workers count each job out once. A job an earlier, failed try added for the same entry was not
// counted then, and is now. The token is only ever raised. KEYS: marks, token key, backlog hash,
// then the job hashes. ARGV: prune marks below this seq, token, sink, then seq, id, change count
// and timestamp of every job's entry.
const MARK = `
for i = 4, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    return redis.error_reply('job ' .. KEYS[i] .. ' was not added; not marked forwarded')
  end
end
local counted = 0
for i = 4, #KEYS do
  local at = 4 + (i - 4) * 4
  if redis.call('HGET', KEYS[i], 'timestamp') == ARGV[at + 3] then counted = counted + tonumber(ARGV[at + 2]) end
end
-- A script is not rolled back: the count goes first, so a failure leaves no mark without it.
if counted > 0 then redis.call('HINCRBY', KEYS[3], ARGV[3], counted) end
for i = 4, #KEYS do
  local at = 4 + (i - 4) * 4
  redis.call('ZADD', KEYS[1], ARGV[at], ARGV[at + 1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1])
if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[2]) then redis.call('SET', KEYS[2], ARGV[2]) end
return 1`;

export interface OutboxForwarder {
  /** Forwards every new entry of the source's outbox; resolves with how many were dropped. */
  forward(source: string, fence: LeaseFence | undefined): Promise<number>;
}

/**
 * How long forwarded entries stay in the outbox before they are checked once more in their
 * queues and dropped. A queue's primary restarted from its AOF (appendfsync everysec: the last
 * second or so may be missing) or failed over to a replica that lagged loses its last writes, the
 * marks with the slices: an entry still in the outbox is then forwarded again, in order.
 */
export const DROP_AFTER_MS = 5_000;

/** An entry this holder forwarded, still at the outbox's head. */
interface Forwarded {
  raw: string;
  seq: number;
  entry: Entry;
  at: number;
}

export function createOutboxForwarder(opts: {
  /** WATCHes: the page committer's connection, used by one operation at a time. */
  connection: Redis;
  keys: KeySpace;
  /** A sink shard's queue on `connection` (its BullMQ-aware client runs the adds). */
  queueOf(sink: string, shard: number): Queue<ChangeSlice>;
  jobOptions: Record<string, unknown>;
  minReplicasAcked: number;
  /** Changes whenever the connection reconnected: a reconnect silently drops a WATCH. */
  connectionEpoch(): number;
  /** The lease is not ours any more: a newer holder forwards this source's pages. */
  fenced(source: string, detail: string): Error;
  /** Default DROP_AFTER_MS. */
  dropAfterMs?: number;
}): OutboxForwarder {
  const { connection, keys } = opts;
  const dropAfterMs = opts.dropAfterMs ?? DROP_AFTER_MS;
  /** Per source: the outbox's head as this holder (under `token`) forwarded it. */
  const heads = new Map<string, { token: number; done: Forwarded[] }>();
  /**
   * Per source: this process's recent drops (every entry below `below` dropped, at `at`), and the
   * seq below which marks may be pruned: that of the newest drop at least dropAfterMs old.
   */
  const drops = new Map<string, { floor: number; recent: { below: number; at: number }[] }>();
  /** The timestamp of an entry's jobs; entries of earlier versions get one per forward. */
  let lastStamp = 0;
  const stampOf = (entry: Entry): number => entry.at ?? (lastStamp = Math.max(Date.now(), lastStamp + 1));

  /** Marks below this seq may go: their entries were dropped by drops old enough to be durable. */
  function prunable(source: string, now: number): number {
    const d = drops.get(source);
    if (!d) return 0;
    while (d.recent.length && now - d.recent[0]!.at >= dropAfterMs) d.floor = d.recent.shift()!.below;
    return d.floor;
  }

  async function forward(source: string, fence: LeaseFence | undefined): Promise<number> {
    const token = fence?.token ?? 0;
    let head = heads.get(source);
    if (head?.token !== token) {
      head = { token, done: [] };
      heads.set(source, head);
    }
    try {
      return await forwardNew(source, fence, head.done);
    } catch (err) {
      // Read the outbox from its head next time: forwarding again is a no-op where it landed.
      heads.delete(source);
      throw err;
    }
  }

  async function forwardNew(
    source: string,
    fence: LeaseFence | undefined,
    done: Forwarded[],
  ): Promise<number> {
    const key = outboxKey(keys, source);
    const fresh: Forwarded[] = [];
    for (;;) {
      // From the last entry already forwarded: if it is not where it was, the outbox is not what
      // this holder saw (its primary lost writes): start over from the head.
      const from = done.length + fresh.length;
      const raw = await connection.lrange(key, Math.max(0, from - 1), from + BATCH - 1);
      const known = fresh.at(-1) ?? done.at(-1);
      if (from > 0 && (raw.length === 0 || parse(source, raw[0]!).entry.id !== known?.entry.id))
        throw new FeedsyncError(`the page outbox of ${source} changed underneath its holder`, true);
      const added = raw.slice(from > 0 ? 1 : 0).map((text) => ({ raw: text, ...parse(source, text), at: 0 }));
      fresh.push(...added);
      if (added.length < BATCH) break;
    }
    const now = performance.now();
    for (const f of fresh) f.at = now;
    const all = [...done, ...fresh];
    let due = 0;
    while (due < all.length && now - all[due]!.at >= dropAfterMs) due++;
    if (fresh.length === 0 && due === 0) return 0;
    // Every queue the new entries go to, and every queue of the entries due to be dropped: each
    // gets, in outbox order, whatever of the held entries its marks do not show (the new ones, or
    // what it lost since), which also checks the due entries once more before they go.
    const tags = new Set<string>();
    for (const f of [...fresh, ...all.slice(0, due)])
      for (const slice of f.entry.slices) tags.add(keys.queueTag(slice.sink, slice.shard));
    for (const tag of tags) {
      const items = all.flatMap((f) =>
        f.entry.slices
          .filter((slice) => keys.queueTag(slice.sink, slice.shard) === tag)
          .map((slice) => ({ seq: f.seq, id: f.entry.id, stamp: stampOf(f.entry), slice })),
      );
      const newHere = fresh.some((f) =>
        f.entry.slices.some((sl) => keys.queueTag(sl.sink, sl.shard) === tag),
      );
      await forwardTo(source, tag, items, prunable(source, now), fence, newHere);
    }
    done.push(...fresh);
    if (due === 0) return 0;
    const ok = await connection.eval(
      DROP,
      2,
      key,
      fence?.leaseKey ?? key,
      fence?.value ?? '',
      done[0]!.raw,
      String(due),
    );
    if (Number(ok) === 0) throw opts.fenced(source, 'the lease was lost while forwarding');
    if (Number(ok) !== 1)
      throw new FeedsyncError(`the page outbox of ${source} changed underneath its holder`, true);
    const d = drops.get(source) ?? { floor: 0, recent: [] };
    d.recent.push({ below: done[due - 1]!.seq + 1, at: performance.now() });
    drops.set(source, d);
    done.splice(0, due);
    return due;
  }

  async function forwardTo(
    source: string,
    tag: string,
    items: { seq: number; id: string; stamp: number; slice: OutboxSlice }[],
    pruneBelow: number,
    fence: LeaseFence | undefined,
    /** Entries new to this holder go there: already in place, they may lack their replicas' WAIT. */
    newHere: boolean,
  ): Promise<void> {
    const marks = forwardedKey(tag, source);
    const tokenKey = forwardTokenKey(tag, source);
    const token = fence?.token ?? 0;
    const queue = opts.queueOf(items[0]!.slice.sink, items[0]!.slice.shard);
    const client = (await queue.backend.client) as unknown as Redis;
    for (let attempt = 1; ; attempt++) {
      const epoch = opts.connectionEpoch();
      // On a cluster the WATCH holds on one node's connection, which the client may replace (or the
      // slot move) without a word: the MULTI must go out on that same connection.
      const node = nodeForKey(connection, marks);
      // WATCH and both reads go out together on the one connection: the reads are under the WATCH.
      const [, stored, scores] = await Promise.all([
        connection.watch(marks, tokenKey),
        connection.get(tokenKey),
        connection.zmscore(marks, ...items.map((i) => i.id)),
      ]).catch(async (err: unknown) => {
        await unwatchKey(connection, marks).catch(() => undefined);
        throw err;
      });
      if (stored !== null && Number(stored) > token) {
        await unwatchKey(connection, marks);
        throw opts.fenced(source, `token ${stored} forwards its pages now, ours is ${token}`);
      }
      const pending = items.filter((_, i) => scores[i] === null);
      if (pending.length === 0 && stored !== null && Number(stored) === token) {
        await unwatchKey(connection, marks);
        // New entries all there already: an earlier try put them there, maybe with its WAIT falling
        // short: wait for the replicas now (a write of ours first, so the WAIT covers everything
        // written there before). Only checking held entries again: this holder waited for them.
        if (newHere)
          await awaitReplicas(connection, opts.minReplicasAcked, `the pages of ${source} in ${tag}`, {
            tag,
            touch: true,
          });
        return;
      }
      const tx = client.multi() as unknown as ChainableCommander;
      await Promise.all(
        pending.map(({ slice, stamp }) =>
          new Job<ChangeSlice>(
            queue,
            'slice',
            { changes: slice.changes },
            { ...opts.jobOptions, jobId: slice.jobId, timestamp: stamp },
            slice.jobId,
          ).addJob(tx as never),
        ),
      );
      tx.eval(
        MARK,
        3 + pending.length,
        marks,
        tokenKey,
        backlogKey(tag),
        ...pending.map((i) => queue.toKey(i.slice.jobId)),
        String(pruneBelow),
        String(token),
        items[0]!.slice.sink,
        ...pending.flatMap((i) => [String(i.seq), i.id, String(i.slice.changes.length), String(i.stamp)]),
      );
      if (opts.connectionEpoch() !== epoch || nodeForKey(connection, marks) !== node) {
        // Nothing was sent: a MULTI goes out at exec().
        await unwatchKey(connection, marks).catch(() => undefined);
        throw new FeedsyncError(`redis reconnected while forwarding pages of ${source}; retrying`, true);
      }
      const results = (await tx.exec()) as [Error | null, unknown][] | null;
      if (results === null) {
        // Another forwarder wrote there meanwhile (a holder that lost the lease, or the next one):
        // read again; the token check above settles who goes on.
        if (attempt < 3) continue;
        throw new FeedsyncError(`pages of ${source}: forwarding to ${tag} raced another forwarder`, true);
      }
      const failed = results.find(([err]) => err);
      if (failed)
        // Nothing was marked: the whole batch is forwarded again, and the adds that did go in are
        // no-ops then (a job add is a no-op for an id the queue still holds).
        throw new FeedsyncError(
          `redis refused part of forwarding pages of ${source} to ${tag}: ${errorMessage(failed[0])}`,
          true,
        );
      await awaitReplicas(connection, opts.minReplicasAcked, `the pages of ${source} forwarded to ${tag}`, {
        tag,
      });
      return;
    }
  }

  return { forward };
}

function parse(source: string, text: string): { seq: number; entry: Entry } {
  const space = text.indexOf(' ');
  const seq = Number(text.slice(0, space));
  try {
    const entry = JSON.parse(text.slice(space + 1)) as Entry;
    if (Number.isSafeInteger(seq) && typeof entry.id === 'string' && Array.isArray(entry.slices))
      return { seq, entry };
  } catch {
    // reported below
  }
  throw new FeedsyncError(`the page outbox of ${source} holds an entry feedsync cannot read`, false);
}
