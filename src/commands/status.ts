import type { FeedsyncConfig } from '../config/types.js';
import { openOps } from './admin.js';

const iso = (ms: number | null) => (ms ? new Date(ms).toISOString() : '-');

/** `feedsync status [--json]`: per source and per sink, from the store and the queue. */
export async function statusCommand(
  config: FeedsyncConfig,
  json: boolean,
  out: (s: string) => void,
): Promise<void> {
  const ops = await openOps(config);
  try {
    const sources = await ops.cursors.status(config.sources.map((s) => s.name));
    // Who polls what: with standby pollers (scaled mode) the lease holder of each source.
    const pollers = await Promise.all(sources.map((s) => ops.lockHolder(s.source)));
    const sinks = await ops.admin.counts();
    const report = {
      sources: sources.map((s, i) => ({
        source: s.source,
        polled_by: pollers[i] ?? null,
        cursor: s.cursor,
        last_event_at: s.lastEventAt ? new Date(s.lastEventAt).toISOString() : null,
        last_poll_at: s.lastPollAt ? new Date(s.lastPollAt).toISOString() : null,
        last_successful_poll_at: s.lastOkAt ? new Date(s.lastOkAt).toISOString() : null,
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
    if (json) return out(JSON.stringify(report, null, 2));
    out('SOURCE            CURSOR        STATE         LAST EVENT                 LAST OK POLL');
    for (const s of sources)
      out(
        `${s.source.padEnd(17)} ${String(s.cursor ?? '-').padEnd(13)} ${(s.lastPollAt === null ? 'never polled' : s.behind ? 'behind' : 'caught up').padEnd(13)} ${iso(s.lastEventAt).padEnd(26)} ${iso(s.lastOkAt)}`,
      );
    for (const [i, s] of sources.entries()) if (pollers[i]) out(`  ${s.source}: polled by ${pollers[i]}`);
    for (const s of sources) if (s.lastError) out(`  ${s.source}: last error: ${s.lastError}`);
    out('');
    out('SINK              QUEUED   IN FLIGHT  DELAYED  RETRYING  DEAD');
    for (const r of report.sinks)
      out(
        `${r.sink.padEnd(17)} ${String(r.queued).padEnd(8)} ${String(r.in_flight).padEnd(10)} ${String(r.delayed).padEnd(8)} ${String(r.retrying).padEnd(9)} ${r.dead}`,
      );
  } finally {
    await ops.close();
  }
}
