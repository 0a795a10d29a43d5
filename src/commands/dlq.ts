import type { FeedsyncConfig } from '../config/types.js';
import { FeedsyncError } from '../core/errors.js';
import { terminalJson, terminalSafe } from '../core/terminal-text.js';
import type { DeadLetter, DeadLetterFilter } from '../queue/queue.js';
import { openOps, type OpsHandles } from './admin.js';

/** One element of `feedsync dlq list --json` (an array of these): the shape docs/cli.md documents. */
export interface DeadLetterJson {
  sink: string;
  key: string;
  event_type: string;
  attempts: number;
  failed_at: string;
  error: string;
  /** The feedsync.change.v1 that could not be delivered. */
  change: DeadLetter['change'];
}

export interface DlqOptions {
  sink?: string;
  key?: string;
  json?: boolean;
  limit?: number;
  /** retry/drop: print what would be affected instead of acting. */
  dryRun?: boolean;
}

/**
 * Which dead letters: the queue's own filter (sink, key) and, read through it, the change's
 * source and event type and a piece of the error text (`q`, case-insensitive substring: never a
 * pattern, the text quotes upstream).
 */
export interface DeadLetterQuery extends DeadLetterFilter {
  source?: string;
  event_type?: string;
  q?: string;
}

export type DeadLetterAction = 'retry' | 'drop';

/** Lines of a dry run listed before "… and N more". */
const DRY_RUN_SHOWN = 20;

/**
 * `feedsync dlq list | retry | drop [--sink NAME] [--key KEY | --all] [--dry-run] [--json]`.
 * The CLI has already refused retry/drop that would act on everything without --all.
 */
export async function dlqCommand(
  config: FeedsyncConfig,
  action: 'list' | 'retry' | 'drop',
  opts: DlqOptions,
  out: (s: string) => void,
): Promise<void> {
  const ops = await openOps(config);
  try {
    const query = { sink: opts.sink, key: opts.key };
    if (action === 'list') {
      const dead = await findDeadLetters(ops, query, opts.limit ?? 100);
      if (opts.json) return out(terminalJson(dead.map(deadLetterJson), 2));
      if (!dead.length) return out('no dead letters');
      for (const d of dead) out(line(d));
      return;
    }
    const verb = action === 'retry' ? 're-queue' : 'drop';
    if (opts.dryRun) {
      const dead = await findDeadLetters(ops, query);
      for (const d of dead.slice(0, DRY_RUN_SHOWN)) out(line(d));
      if (dead.length > DRY_RUN_SHOWN) out(`… and ${dead.length - DRY_RUN_SHOWN} more`);
      out(`dry run: would ${verb} ${letters(dead.length)} (nothing changed)`);
      return;
    }
    const n = await actOnDeadLetters(ops, action, { query });
    out(`${action === 'retry' ? 're-queued' : 'dropped'} ${letters(n)}`);
  } finally {
    await ops.close();
  }
}

const letters = (n: number) => `${n} dead letter${n === 1 ? '' : 's'}`;

/** Whether the query asks for more than the queue itself filters on (sink, key). */
export const readsThrough = (q: DeadLetterQuery): boolean =>
  q.source !== undefined || q.event_type !== undefined || (q.q !== undefined && q.q !== '');

/** The query's source, event type and text filters as a test of one dead letter. */
export function matchesQuery(query: DeadLetterQuery): (d: DeadLetter) => boolean {
  const needle = query.q?.toLowerCase();
  return (d) =>
    (query.source === undefined || d.change.source === query.source) &&
    (query.event_type === undefined || d.change.event_type === query.event_type) &&
    (!needle || d.error.toLowerCase().includes(needle));
}

/** The dead letters matching `query`, oldest first; at most `limit` (default: all). */
export async function findDeadLetters(
  ops: Pick<OpsHandles, 'admin'>,
  query: DeadLetterQuery,
  limit = Number.MAX_SAFE_INTEGER,
): Promise<DeadLetter[]> {
  const filter = { sink: query.sink, key: query.key };
  if (!readsThrough(query)) return ops.admin.listDead(filter, limit);
  return (await ops.admin.listDead(filter, Number.MAX_SAFE_INTEGER))
    .filter(matchesQuery(query))
    .slice(0, limit);
}

/** What retry/drop acts on: every dead letter matching a query, or these ids (`<sink>/<key>`). */
export type DeadLetterSelection = { query: DeadLetterQuery } | { ids: string[] };

/**
 * Re-queues (retry) or deletes (drop) the selected dead letters; returns how many. A query the
 * queue filters on itself is one call (paged inside the driver); otherwise each match is acted
 * on by its sink and key.
 */
export async function actOnDeadLetters(
  ops: Pick<OpsHandles, 'admin'>,
  action: DeadLetterAction,
  selection: DeadLetterSelection,
): Promise<number> {
  const act = (f: DeadLetterFilter) => (action === 'retry' ? ops.admin.retryDead(f) : ops.admin.dropDead(f));
  if ('query' in selection && !readsThrough(selection.query))
    return act({ sink: selection.query.sink, key: selection.query.key });
  const targets =
    'ids' in selection
      ? selection.ids.map(parseDeadLetterId)
      : (await findDeadLetters(ops, selection.query)).map((d) => ({ sink: d.sink, key: d.key }));
  let n = 0;
  for (const t of targets) n += await act(t);
  return n;
}

/** How many dead letters a retry/drop of `selection` would act on now. */
export async function countDeadLetters(
  ops: Pick<OpsHandles, 'admin'>,
  selection: DeadLetterSelection,
): Promise<number> {
  if ('query' in selection) return (await findDeadLetters(ops, selection.query)).length;
  let n = 0;
  for (const id of selection.ids) n += (await findDeadLetters(ops, parseDeadLetterId(id), 1)).length;
  return n;
}

/**
 * A dead letter's id in the admin API: `<sink>/<key>` (sink and key name it in the queue; the
 * JSON keeps the CLI's shape, so the id is made from its `sink` and `key`). Split at the last "/":
 * a sink name may hold one, a change key (`<source>:<event id>`) not.
 */
export function parseDeadLetterId(id: string): { sink: string; key: string } {
  const at = id.lastIndexOf('/');
  if (at <= 0 || at === id.length - 1)
    throw new FeedsyncError(`dead letter id must be <sink>/<key>, got "${id.slice(0, 200)}"`, false);
  return { sink: id.slice(0, at), key: id.slice(at + 1) };
}

/** One dead letter on one line; its texts (an upstream event type, an error quoting upstream) terminal-safe. */
function line(d: DeadLetter): string {
  const [sink, key, type, error] = [d.sink, d.key, d.change.event_type, d.error].map((t) => terminalSafe(t));
  return `${sink}\t${key}\t${type}\tattempts=${d.attempts}\t${new Date(d.failedAt).toISOString()}\t${error}`;
}

export function deadLetterJson(d: DeadLetter): DeadLetterJson {
  return {
    sink: d.sink,
    key: d.key,
    event_type: d.change.event_type,
    attempts: d.attempts,
    failed_at: new Date(d.failedAt).toISOString(),
    error: d.error,
    change: d.change,
  };
}
