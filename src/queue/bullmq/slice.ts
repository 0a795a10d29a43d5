// A slice is what one BullMQ job carries: the changes of one commit (a page, or the pages of a
// backlog committed together) that one sink gets on one shard, in feed order. Producer, delivery
// and admin share these helpers so they agree on ids and shapes.
import { randomBytes } from 'node:crypto';
import { Job, type JobJson } from 'bullmq';
import type { QueueConfig } from '../../config/types.js';
import { FeedsyncError } from '../../core/errors.js';
import type { Change } from '../../core/change.js';
import { changeJson, parseChangeJson } from '../../core/change-json.js';
import { jobIdForKey } from './names.js';

export interface ChangeSlice {
  changes: Change[];
}

/**
 * A page commit adds its slices under UNCOUNTED_SLICE, and the commit's own counting script (the
 * one that moves the cursor and counts the slices into the backlog) renames them COUNTED_SLICE in
 * the same transaction. A slice's delivered changes leave the backlog only if it is named
 * COUNTED_SLICE, so a slice that exists without its commit's count (Redis 7.0 can replay the
 * front of a transaction its AOF lost the end of, after a second restart: valkey-io/valkey#4342)
 * is delivered, at least once as always, but never counted out. Slices of earlier releases carry
 * COUNTED_SLICE already.
 */
export const COUNTED_SLICE = 'slice';
export const UNCOUNTED_SLICE = 'slice-uncounted';

/**
 * A slice job whose data is written from its changes' JSON texts (change-json.ts), and read back
 * the same way: a change is serialised once however many sinks and shards it goes to, and a sink
 * that writes JSON (jsonl, webhook) sends the very text the poller made. The data is the JSON
 * `{"changes":[…],"lengths":[…]}`: `lengths` gives each change text's length, so a worker cuts
 * the texts apart without a scan (readSlice); any other reader sees a slice with one extra field.
 */
export class SliceJob extends Job<ChangeSlice> {
  /**
   * The job as BullMQ writes it, its `data` the slice's UTF-8 bytes (sliceBytes) though typed as
   * text: a SliceJob is only ever added (page-commit.ts), and what Redis stores, and every reader
   * gets back, is the same text either way.
   */
  override asJSON(): JobJson {
    const { data } = this;
    // BullMQ's asJSON stringifies `data` itself: hand it nothing to do, then put the text in.
    this.data = undefined as unknown as ChangeSlice;
    try {
      return { ...super.asJSON(), data: sliceBytes(data.changes.map(changeJson)) as unknown as string };
    } finally {
      this.data = data;
    }
  }

  static override fromJSON<T = unknown, R = unknown, N extends string = string>(
    queue: Parameters<typeof Job.fromJSON>[0],
    json: JobJson,
    jobId?: string,
  ): Job<T, R, N> {
    const job = super.fromJSON<T, R, N>(queue, { ...json, data: '{}' }, jobId);
    job.data = readSlice(json.data) as T;
    return job;
  }
}

const SLICE_START = '{"changes":[';
const SLICE_LENGTHS = '],"lengths":[';

/**
 * The slice's JSON written straight into one Buffer, text by text. BullMQ hands `data` to ioredis
 * as an argument of its add script beside a binary one (the packed options), and ioredis then
 * copies a string argument twice more on the heap before it reaches the socket (Buffer.byteLength
 * of the joined text, then of "$<length>\r\n" + text + "\r\n"); a Buffer it writes as it is.
 * Redis stores the same bytes either way.
 */
function sliceBytes(texts: string[]): Buffer {
  const lengths = texts.map((t) => t.length).join(',');
  let size = SLICE_START.length + SLICE_LENGTHS.length + lengths.length + 2 + Math.max(0, texts.length - 1);
  for (const text of texts) size += Buffer.byteLength(text);
  const bytes = Buffer.allocUnsafe(size);
  let at = bytes.write(SLICE_START, 0, 'latin1');
  for (const [i, text] of texts.entries()) {
    if (i > 0) at += bytes.write(',', at, 'latin1');
    at += bytes.write(text, at);
  }
  at += bytes.write(SLICE_LENGTHS, at, 'latin1');
  at += bytes.write(lengths, at, 'latin1');
  bytes.write(']}', at, 'latin1');
  return bytes;
}

/**
 * A job's data as SliceJob wrote it, each change parsed from its own text (which it keeps, so
 * it is not serialised again); anything else (an earlier release's slice) is parsed whole.
 */
export function readSlice(raw: string | undefined): unknown {
  const text = raw || '{}';
  const mark = text.lastIndexOf(SLICE_LENGTHS);
  if (!text.startsWith(SLICE_START) || mark < 0 || !text.endsWith(']}')) return JSON.parse(text);
  const lengths = text
    .slice(mark + SLICE_LENGTHS.length, -2)
    .split(',')
    .map(Number);
  const changes: Change[] = [];
  let at = SLICE_START.length;
  for (const [i, length] of lengths.entries()) {
    const end = at + length;
    // Each text ends where a comma follows it, the last one at the lengths; lengths that do not
    // tile the array exactly are not ours after all: parse it whole.
    const tiles = i === lengths.length - 1 ? end === mark : end < mark && text[end] === ',';
    if (!Number.isSafeInteger(length) || length <= 0 || !tiles) return JSON.parse(text);
    changes.push(parseChangeJson(text.slice(at, end)));
    at = end + 1;
  }
  return { changes };
}

/**
 * A slice job's id: its first and last change keys (readable in `dlq` and logs), and `commit`, a
 * token fresh for every page commit. A page is queued once because its commit is one atomic step
 * that checks the cursor it follows (page-commit.ts), not because BullMQ finds an id it already
 * holds: a completed job kept for dashboards is never mistaken for a new one, and a page read
 * again after `cursor set` or a replay is queued again, as asked.
 */
export function sliceJobId(changes: readonly Pick<Change, 'key'>[], commit: string): string {
  const first = changes[0];
  const last = changes.at(-1);
  if (!first || !last) throw new FeedsyncError('cannot name an empty slice', false);
  return `${jobIdForKey(first.key)}+${jobIdForKey(last.key)}+${commit}`;
}

/** The token that tells one page commit's slices from another's (48 random bits). */
export function commitToken(): string {
  return randomBytes(6).toString('hex');
}

/** A dead letter re-queued by `dlq retry`: a one-change slice of its own commit. */
export function retrySliceJobId(change: Pick<Change, 'key'>): string {
  return sliceJobId([change], `retry-${commitToken()}`);
}

/**
 * The changes of a slice job. Only slices are read: the earliest release an upgrade starts from
 * (test/reliability-bullmq/upgrade.test.ts) queues nothing else.
 */
export function changesOf(data: unknown, jobId?: string): Change[] {
  if (isRecord(data) && Array.isArray(data.changes) && data.changes.every(isChange)) {
    return data.changes;
  }
  throw new FeedsyncError(`bullmq job ${jobId ?? '(no id)'}: data is not a slice { changes: [...] }`, false);
}

/** Who a change is about, for batches and rounds: its subject URL, or its key when it has none. */
function subjectOf(change: Change): string {
  return change.subject_url === null ? `key:${change.key}` : `url:${change.subject_url}`;
}

/**
 * A shard's changes in rounds: each subject's first change (in feed order), then each one's
 * second, and so on. Every subject keeps its order, and a batch (batchRunLength) runs to the end
 * of a round instead of stopping at the first subject seen twice: with the feed's repeats, about
 * half the sink calls and progress writes. Only for a shard that is part of the feed; the shard of
 * `shards: 1` is the whole feed, and keeps its order (docs/how-it-works.md, Order).
 */
export function inRounds(changes: Change[]): Change[] {
  const seen = new Map<string, number>();
  const rounds: Change[][] = [];
  for (const change of changes) {
    const subject = subjectOf(change);
    const round = seen.get(subject) ?? 0;
    seen.set(subject, round + 1);
    (rounds[round] ??= []).push(change);
  }
  return rounds.length > 1 ? rounds.flat() : changes;
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
    const subject = subjectOf(changes[end]!);
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
 * Options of every slice job. Completed slices are kept as queue.retain_completed_* say, for
 * dashboards only (ids are fresh per commit: nothing finds them again); failed ones stay until
 * their changes are dead-lettered.
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
