import type { FeedsyncConfig } from '../config/types.js';
import { terminalJson, terminalSafe } from '../core/terminal-text.js';
import type { DeadLetter } from '../queue/queue.js';
import { openOps } from './admin.js';

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
    const filter = { sink: opts.sink, key: opts.key };
    if (action === 'list') {
      const dead = await ops.admin.listDead(filter, opts.limit ?? 100);
      if (opts.json) return out(terminalJson(dead.map(toJson), 2));
      if (!dead.length) return out('no dead letters');
      for (const d of dead) out(line(d));
      return;
    }
    const verb = action === 'retry' ? 're-queue' : 'drop';
    if (opts.dryRun) {
      const dead = await ops.admin.listDead(filter, Number.MAX_SAFE_INTEGER);
      for (const d of dead.slice(0, DRY_RUN_SHOWN)) out(line(d));
      if (dead.length > DRY_RUN_SHOWN) out(`… and ${dead.length - DRY_RUN_SHOWN} more`);
      out(`dry run: would ${verb} ${letters(dead.length)} (nothing changed)`);
      return;
    }
    const n = action === 'retry' ? await ops.admin.retryDead(filter) : await ops.admin.dropDead(filter);
    out(`${action === 'retry' ? 're-queued' : 'dropped'} ${letters(n)}`);
  } finally {
    await ops.close();
  }
}

const letters = (n: number) => `${n} dead letter${n === 1 ? '' : 's'}`;

/** One dead letter on one line; its texts (an upstream event type, an error quoting upstream) terminal-safe. */
function line(d: DeadLetter): string {
  const [sink, key, type, error] = [d.sink, d.key, d.change.event_type, d.error].map((t) => terminalSafe(t));
  return `${sink}\t${key}\t${type}\tattempts=${d.attempts}\t${new Date(d.failedAt).toISOString()}\t${error}`;
}

function toJson(d: DeadLetter): DeadLetterJson {
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
