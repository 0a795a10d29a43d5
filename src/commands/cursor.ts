import type { FeedsyncConfig, SourceConfig } from '../config/types.js';
import { ConfigError } from '../core/errors.js';
import { findLatestEventId } from '../pipeline/poller.js';
import { services } from '../services/index.js';
import { createUpstreamClient, sourceClientOptions, type UpstreamClient } from '../upstream/client.js';
import { openOps, type OpsHandles } from './admin.js';
import { CommandError, InterruptedError } from './errors.js';
import { untilInterrupted } from './interrupt.js';
import { progressOn, type Progress } from './progress.js';

/** `feedsync cursor show --json`: the shape docs/cli.md documents. */
export interface CursorReport {
  cursors: { source: string; cursor: number | null }[];
}

/** `feedsync cursor show [--json] | set SOURCE ID | reset SOURCE --to latest|earliest`. */
export async function cursorCommand(
  config: FeedsyncConfig,
  action: 'show' | 'set' | 'reset',
  args: { source?: string; id?: string; to?: string; json?: boolean },
  out: (s: string) => void,
): Promise<void> {
  const ops = await openOps(config);
  try {
    if (action === 'show') {
      const cursors = await readCursors(config, ops);
      if (args.json) return out(JSON.stringify({ cursors } satisfies CursorReport, null, 2));
      for (const s of cursors) out(`${s.source}	${s.cursor ?? '(none: start_from applies)'}`);
      return;
    }
    const source = cursorSource(config, args.source);
    let target: CursorTarget;
    if (action === 'set') {
      if (!args.id || !/^\d+$/.test(args.id))
        throw new ConfigError('', `cursor set needs a non-negative integer event id, got "${args.id}"`);
      target = Number(args.id);
    } else if (args.to === 'earliest') target = 0;
    else if (args.to === 'latest') target = 'latest';
    else throw new ConfigError('', `cursor reset needs --to latest or --to earliest, got "${args.to}"`);
    const moved = await moveCursor(ops, source, target, progressOn());
    out(`${source.name}: cursor ${moved.before ?? '(none)'} → ${moved.cursor}`);
  } finally {
    await ops.close();
  }
}

export async function readCursors(
  config: FeedsyncConfig,
  ops: Pick<OpsHandles, 'sourceState'>,
): Promise<CursorReport['cursors']> {
  return (await ops.sourceState.status(config.sources.map((x) => x.name))).map((s) => ({
    source: s.source,
    cursor: s.cursor,
  }));
}

/** The configured source of that name, or a ConfigError listing the configured ones. */
export function cursorSource(config: FeedsyncConfig, name: string | undefined): SourceConfig {
  const source = config.sources.find((s) => s.name === name);
  if (!source)
    throw new ConfigError(
      '',
      `unknown source "${name}" (configured: ${config.sources.map((s) => s.name).join(', ')})`,
    );
  return source;
}

/** An event id, or `latest`: the feed's newest event, found by paging through it. */
export type CursorTarget = number | 'latest';

/** A poller holds the source: the cursor was not moved. `holder` names the process. */
export class SourceHeldError extends CommandError {
  override name = 'SourceHeldError';
  constructor(
    readonly source: string,
    readonly holder: string,
  ) {
    super(`refusing to move the cursor of "${source}": a poller holds it (${holder}); stop it first`);
  }
}

/**
 * Moves the source's cursor, holding the source from before the feed is read until the write: a
 * poller that starts meanwhile waits, and one that took the source anyway (this hold paused past
 * the lease) makes the write fail. Throws SourceHeldError while a poller holds it.
 */
export async function moveCursor(
  ops: Pick<OpsHandles, 'leases' | 'sourceState'>,
  source: SourceConfig,
  target: CursorTarget,
  progress: Progress,
): Promise<{ source: string; before: number | null; cursor: number }> {
  // Asked first: a process holding the source itself (the daemon serving the admin API) would
  // otherwise be granted the hold as its own lease's owner, and move the cursor under its poller.
  const holder = await ops.leases.holder(source.name);
  if (holder !== undefined) throw new SourceHeldError(source.name, holder);
  const held = await ops.leases.hold(source.name);
  if ('holder' in held) throw new SourceHeldError(source.name, held.holder);
  try {
    const cursor = target === 'latest' ? await latestEventId(source, progress) : target;
    if (held.lost.aborted)
      throw new CommandError(
        `the cursor of "${source.name}" was not changed: this command lost its hold on the source (paused, or the store/redis unreachable, longer than the lease)`,
      );
    const before = (await ops.sourceState.get(source.name))?.eventId ?? null;
    await held.save(cursor, []);
    return { source: source.name, before, cursor };
  } finally {
    await held.release();
  }
}

/**
 * Pages through the source's feed to its newest event, reporting each page. Ctrl-C abandons the
 * request in flight: nothing has been written yet, and InterruptedError says so.
 */
async function latestEventId(source: SourceConfig, progress: Progress): Promise<number> {
  const client = createUpstreamClient({
    ...sourceClientOptions(source),
    linkRel: services[source.service].linkRel,
  });
  let pages = 0;
  const counting: UpstreamClient = {
    ...client,
    get: async (url, opts) => {
      const newerThan = new URL(url).searchParams.get('newer_than') ?? '0';
      progress.update(
        `${source.name}: paging the feed to its newest event: page ${++pages}, after event ${newerThan}`,
      );
      return client.get(url, opts);
    },
  };
  try {
    const { value, interrupted } = await untilInterrupted((signal) =>
      findLatestEventId(counting, source.base_url, signal).catch((err: unknown) => {
        if (signal.aborted) return null;
        throw err;
      }),
    );
    if (interrupted || value === null)
      throw new InterruptedError(
        `interrupted after ${pages} page${pages === 1 ? '' : 's'}: the cursor of "${source.name}" was not changed`,
      );
    return value;
  } finally {
    progress.done();
    await client.close();
  }
}
