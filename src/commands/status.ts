import type { FeedsyncConfig } from '../config/types.js';
import { openOps, type OpsHandles } from './admin.js';
import { untilInterrupted } from './interrupt.js';

const iso = (ms: number | null) => (ms ? new Date(ms).toISOString() : null);

/** `feedsync status --json`: the shape docs/cli.md documents. Add fields; never rename or remove. */
export interface StatusReport {
  sources: {
    source: string;
    cursor: number | null;
    /** The process holding the source's lease (polling it), or null. */
    polled_by: string | null;
    last_event_at: string | null;
    last_poll_at: string | null;
    last_successful_poll_at: string | null;
    state: 'never polled' | 'behind' | 'caught up';
    last_error: string | null;
  }[];
  sinks: {
    sink: string;
    queued: number;
    in_flight: number;
    delayed: number;
    retrying: number;
    dead: number;
  }[];
}

export interface StatusOptions {
  json: boolean;
  /** Refresh every intervalS seconds until SIGINT/SIGTERM. */
  watch?: boolean;
  intervalS?: number;
}

/** `feedsync status [--json] [--watch [--interval S]]`: per source and per sink, from the store and the queue. */
export async function statusCommand(
  config: FeedsyncConfig,
  opts: StatusOptions,
  out: (s: string) => void,
  screen: NodeJS.WriteStream = process.stdout,
): Promise<void> {
  const ops = await openOps(config);
  try {
    if (!opts.watch) {
      const report = await readStatus(config, ops);
      return out(opts.json ? JSON.stringify(report, null, 2) : renderStatus(report));
    }
    // On a terminal the report is redrawn in place; piped, each refresh is appended, so a log
    // or `jq` keeps every one (one compact JSON document per line with --json).
    const inPlace = screen.isTTY === true && !opts.json;
    if (inPlace) screen.write('\x1b[2J'); // a clean screen to redraw on
    await untilInterrupted(async (interrupted) => {
      while (!interrupted.aborted) {
        const report = await readStatus(config, ops);
        if (opts.json) out(JSON.stringify(report));
        else {
          const text = `feedsync status at ${new Date().toISOString()} (every ${opts.intervalS ?? 2} s; Ctrl-C to stop)\n\n${renderStatus(report)}`;
          // Home the cursor, draw, then clear whatever the previous, longer frame left below.
          if (inPlace) screen.write(`\x1b[H${text.replaceAll('\n', '\x1b[K\n')}\x1b[K\n\x1b[J`);
          else out(`${text}\n`);
        }
        await sleep((opts.intervalS ?? 2) * 1000, interrupted);
      }
    });
  } finally {
    await ops.close();
  }
}

async function readStatus(config: FeedsyncConfig, ops: OpsHandles): Promise<StatusReport> {
  const sources = await ops.sourceState.status(config.sources.map((s) => s.name));
  // Who polls what: the holder of each source's lease (with standby pollers, one replica each).
  const pollers = await Promise.all(sources.map((s) => ops.leases.holder(s.source)));
  const sinks = await ops.admin.counts();
  return {
    sources: sources.map((s, i) => ({
      source: s.source,
      cursor: s.cursor,
      polled_by: pollers[i] ?? null,
      last_event_at: iso(s.lastEventAt),
      last_poll_at: iso(s.lastPollAt),
      last_successful_poll_at: iso(s.lastOkAt),
      state: s.lastPollAt === null ? 'never polled' : s.behind ? 'behind' : 'caught up',
      last_error: s.lastError,
    })),
    sinks: Object.entries(sinks).map(([sink, c]) => ({
      sink,
      queued: c.waiting,
      in_flight: c.active,
      delayed: c.delayed,
      retrying: c.failed,
      dead: c.dead,
    })),
  };
}

function renderStatus(report: StatusReport): string {
  const lines = ['SOURCE            CURSOR        STATE         LAST EVENT                 LAST OK POLL'];
  for (const s of report.sources)
    lines.push(
      `${s.source.padEnd(17)} ${String(s.cursor ?? '-').padEnd(13)} ${s.state.padEnd(13)} ${(s.last_event_at ?? '-').padEnd(26)} ${s.last_successful_poll_at ?? '-'}`,
    );
  for (const s of report.sources) if (s.polled_by) lines.push(`  ${s.source}: polled by ${s.polled_by}`);
  for (const s of report.sources) if (s.last_error) lines.push(`  ${s.source}: last error: ${s.last_error}`);
  lines.push('', 'SINK              QUEUED   IN FLIGHT  DELAYED  RETRYING  DEAD');
  for (const r of report.sinks)
    lines.push(
      `${r.sink.padEnd(17)} ${String(r.queued).padEnd(8)} ${String(r.in_flight).padEnd(10)} ${String(r.delayed).padEnd(8)} ${String(r.retrying).padEnd(9)} ${r.dead}`,
    );
  return lines.join('\n');
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
  });
}
