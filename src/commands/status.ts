import type { FeedsyncConfig } from '../config/types.js';
import { terminalJson, terminalSafe } from '../core/terminal-text.js';
import type { SinkState } from '../queue/sink-positions.js';
import { readSinkPositions } from '../observability/sink-positions-view.js';
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
    /** The source's lag: seconds from its newest committed event to now (null: none yet). */
    lag_seconds: number | null;
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
  /**
   * Per (source, sink) the sink's filter lets through: where the sink is in the source's feed
   * (docs/sink-positions.md). live / failing: on the source's shared stream (failing: changes
   * waiting for a retry); parked / catching_up: off it, on its own position.
   */
  positions: {
    source: string;
    sink: string;
    state: SinkState;
    /** The event id the sink has reached (on the shared stream: the source's cursor), or null. */
    position: number | null;
    /** About how many events it is behind: ids between its position and the cursor, plus its queued changes. */
    lag_events: number | null;
    /** Off the shared stream: age of the newest event behind its position, in seconds; else null. */
    lag_seconds: number | null;
    /** Its undelivered queued changes (all sources). */
    queued: number;
    /** Why it is off the shared stream (parked, backfill, replay), else null. */
    reason: string | null;
    /** When it left the shared stream (or the replay was asked for), else null. */
    since: string | null;
    /** Ids passed while it was parked that its catch-up has not seen again yet. */
    pending_ids: number;
    /** More ids were passed than are kept: the lost-upstream check is partial. */
    ids_truncated: boolean;
    /** Events passed while it was parked that the feed no longer listed when it caught up. */
    lost_upstream: { count: number; ids: number[]; at: string | null } | null;
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
      return out(opts.json ? terminalJson(report, 2) : renderStatus(report));
    }
    // On a terminal the report is redrawn in place; piped, each refresh is appended, so a log
    // or `jq` keeps every one (one compact JSON document per line with --json).
    const inPlace = screen.isTTY === true && !opts.json;
    if (inPlace) screen.write('\x1b[2J'); // a clean screen to redraw on
    await untilInterrupted(async (interrupted) => {
      while (!interrupted.aborted) {
        const report = await readStatus(config, ops);
        if (opts.json) out(terminalJson(report));
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

/** The report of `feedsync status --json` and of the admin API's sources and sinks. */
export async function readStatus(
  config: FeedsyncConfig,
  ops: Pick<OpsHandles, 'sourceState' | 'leases' | 'admin' | 'positions'>,
): Promise<StatusReport> {
  const sources = await ops.sourceState.status(config.sources.map((s) => s.name));
  // Who polls what: the holder of each source's lease (with standby pollers, one replica each).
  const pollers = await Promise.all(sources.map((s) => ops.leases.holder(s.source)));
  const sinks = await ops.admin.counts();
  const now = Date.now();
  const { views, lost } = await readSinkPositions(config, ops, { statuses: sources, counts: sinks, now });
  return {
    sources: sources.map((s, i) => ({
      source: s.source,
      cursor: s.cursor,
      polled_by: pollers[i] ?? null,
      last_event_at: iso(s.lastEventAt),
      lag_seconds: s.lastEventAt ? Math.max(0, Math.round((now - s.lastEventAt) / 1000)) : null,
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
    positions: views.map((v) => {
      const l = lost.find((x) => x.source === v.source && x.sink === v.sink);
      return {
        source: v.source,
        sink: v.sink,
        state: v.state,
        position: v.position,
        lag_events: v.lagEvents,
        lag_seconds: v.lagSeconds === null ? null : Math.round(v.lagSeconds * 1000) / 1000,
        queued: v.queued,
        reason: v.reason,
        since: iso(v.since),
        pending_ids: v.pendingIds,
        ids_truncated: v.idsTruncated,
        lost_upstream: l ? { count: l.count, ids: l.ids, at: iso(l.at) } : null,
      };
    }),
  };
}

function renderStatus(report: StatusReport): string {
  const lines = ['SOURCE            CURSOR        STATE         LAST EVENT                 LAST OK POLL'];
  for (const s of report.sources)
    lines.push(
      `${s.source.padEnd(17)} ${String(s.cursor ?? '-').padEnd(13)} ${s.state.padEnd(13)} ${(s.last_event_at ?? '-').padEnd(26)} ${s.last_successful_poll_at ?? '-'}`,
    );
  for (const s of report.sources) if (s.polled_by) lines.push(`  ${s.source}: polled by ${s.polled_by}`);
  for (const s of report.sources)
    if (s.last_error) lines.push(`  ${s.source}: last error: ${terminalSafe(s.last_error)}`);
  lines.push('', 'SINK              QUEUED   IN FLIGHT  DELAYED  RETRYING  DEAD');
  for (const r of report.sinks)
    lines.push(
      `${r.sink.padEnd(17)} ${String(r.queued).padEnd(8)} ${String(r.in_flight).padEnd(10)} ${String(r.delayed).padEnd(8)} ${String(r.retrying).padEnd(9)} ${r.dead}`,
    );
  if (report.positions.length === 0) return terminalSafe(lines.join('\n'), { newlines: true });
  lines.push(
    '',
    'SINK              SOURCE            STATE        POSITION      LAG                     QUEUED',
  );
  for (const p of report.positions)
    lines.push(
      `${p.sink.padEnd(17)} ${p.source.padEnd(17)} ${p.state.padEnd(12)} ${String(p.position ?? '-').padEnd(13)} ${lagText(p).padEnd(23)} ${p.queued}`,
    );
  for (const p of report.positions) {
    if (p.reason)
      lines.push(
        `  ${p.sink} from ${p.source}: off the shared stream since ${p.since ?? '-'} (${p.reason})` +
          (p.pending_ids > 0
            ? `; ${p.pending_ids} ids passed while parked, not seen again yet` +
              (p.ids_truncated ? ' (more than are kept: the lost-upstream check is partial)' : '')
            : ''),
      );
    const lost = p.lost_upstream;
    if (lost)
      lines.push(
        `  ${p.sink} from ${p.source}: ${lost.count} event${lost.count === 1 ? '' : 's'} lost upstream ` +
          `(passed while parked, no longer in the feed; last at ${lost.at ?? '-'}, ` +
          `first id${lost.ids.length === 1 ? '' : 's'} ${firstIds(lost.ids)})`,
      );
  }
  return terminalSafe(lines.join('\n'), { newlines: true });
}

/** `120 events, 3m05s`: events always, seconds only off the shared stream. */
function lagText(p: StatusReport['positions'][number]): string {
  const events = p.lag_events === null ? '-' : `${p.lag_events} event${p.lag_events === 1 ? '' : 's'}`;
  return p.lag_seconds === null ? events : `${events}, ${duration(p.lag_seconds)}`;
}

function duration(seconds: number): string {
  const s = Math.floor(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  const h = Math.floor(s / 3600);
  return h < 48 ? `${h}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m` : `${Math.floor(h / 24)}d`;
}

/** The first ids of a loss, at most 10 named. */
function firstIds(ids: number[]): string {
  const shown = ids.slice(0, 10).join(', ');
  return ids.length > 10 ? `${shown}, …` : shown || '-';
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
