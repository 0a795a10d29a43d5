// A slice is what one BullMQ job carries: the changes of one page that one sink gets on one shard,
// in feed order. Producer, delivery and admin share these helpers so they agree on ids and shapes.
import { randomUUID } from 'node:crypto';
import { Job, type JobJson } from 'bullmq';
import type { QueueConfig } from '../../config/types.js';
import { FeedsyncError } from '../../core/errors.js';
import type { Change } from '../../core/change.js';
import { changeJson } from '../../core/change-json.js';
import { fnv1a, jobIdForKey } from './names.js';

export interface ChangeSlice {
  changes: Change[];
}

/**
 * A slice job whose data is written from its changes' JSON texts (change-json.ts): a change is
 * serialised once however many sinks and shards it goes to, and the bytes are those JSON.stringify
 * would give the slice.
 */
export class SliceJob extends Job<ChangeSlice> {
  override asJSON(): JobJson {
    const { data } = this;
    // BullMQ's asJSON stringifies `data` itself: hand it nothing to do, then put the text in.
    this.data = undefined as unknown as ChangeSlice;
    try {
      return { ...super.asJSON(), data: `{"changes":[${data.changes.map(changeJson).join(',')}]}` };
    } finally {
      this.data = data;
    }
  }
}

/**
 * Deterministic, so that a page replayed after a crash (added, cursor not saved) re-adds as a no-op
 * while the first copy is retained. First and last key make it readable; the hash over every key
 * makes a replay whose slice differs in between (an event listed late by the feed) a NEW job: its
 * changes are then delivered again (same keys, allowed) instead of being dropped as "already there".
 */
export function sliceJobId(changes: readonly Pick<Change, 'key'>[]): string {
  const first = changes[0];
  const last = changes.at(-1);
  if (!first || !last) throw new FeedsyncError('cannot name an empty slice', false);
  const digest = fnv1a(changes.map((c) => c.key).join('\n'))
    .toString(16)
    .padStart(8, '0');
  return `${jobIdForKey(first.key)}+${jobIdForKey(last.key)}+${digest}`;
}

/**
 * A dead letter re-queued by `dlq retry`: a fresh id every time, because a completed slice that
 * held the change may still be retained under any deterministic id, which would make the add a no-op.
 */
export function retrySliceJobId(change: Pick<Change, 'key'>): string {
  return `${jobIdForKey(change.key)}+retry-${randomUUID()}`;
}

/**
 * The changes of a job. Jobs queued before slices existed carry one change as their data; they are
 * read as one-change slices so an upgrade with a non-empty queue delivers them too.
 */
export function changesOf(data: unknown, jobId?: string): Change[] {
  if (isRecord(data) && Array.isArray(data.changes) && data.changes.every(isChange)) {
    return data.changes;
  }
  if (isChange(data)) return [data];
  throw new FeedsyncError(
    `bullmq job ${jobId ?? '(no id)'}: data is neither a slice { changes: [...] } nor a change`,
    false,
  );
}

/**
 * How many changes from `from` on can go to the sink in one deliverBatch call: the run stops before
 * the first change whose subject already occurs in it (a batch never holds two changes of one
 * subject; changes without a subject URL are told apart by key).
 */
export function batchRunLength(changes: readonly Change[], from: number, max = Infinity): number {
  const subjects = new Set<string>();
  let end = from;
  while (end < changes.length && end - from < max) {
    const change = changes[end]!;
    const subject = change.subject_url === null ? `key:${change.key}` : `url:${change.subject_url}`;
    if (subjects.has(subject)) break;
    subjects.add(subject);
    end++;
  }
  return end - from;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isChange(value: unknown): value is Change {
  return isRecord(value) && typeof value.key === 'string' && typeof value.schema === 'string';
}

/**
 * Options of every slice job. Completed slices are kept a while so that a replayed page re-adds as
 * a no-op (the cursor invariant, docs/guarantees.md); failed ones stay until their changes are dead-lettered.
 */
export function sliceJobOptions(config: Pick<QueueConfig, 'retain_completed_ms' | 'retain_completed_count'>) {
  return {
    removeOnComplete: {
      age: Math.max(1, Math.ceil(config.retain_completed_ms / 1000)),
      count: config.retain_completed_count,
    },
    removeOnFail: false,
  };
}
