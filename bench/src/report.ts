// Turns the measurements into derived figures, checks them against the issue's targets and renders
// the table printed at the end of `npm run bench`.
import type { BareBullmqResult } from './bare-bullmq.js';
import type { DrainResult } from './drain.js';
import type { LatencyResult } from './latency.js';
import type { RawResult } from './raw-limit.js';
import type { StartupResult } from './startup.js';
import type { StatusTimeResult } from './status-time.js';

export interface TargetCheck {
  target: string;
  figure: string;
  met: boolean;
}

export interface BenchReport {
  generated_at: string;
  command: string;
  config: Record<string, unknown>;
  machine: Record<string, string>;
  plans: Record<string, { events: number; feed_pages: number; subject_gets: number; requests: number }>;
  raw: RawResult[];
  drains: Omit<DrainResult, 'output'>[];
  bare_bullmq: BareBullmqResult | null;
  latency: LatencyResult;
  startup: StartupResult;
  /** `feedsync status` on a store with many queued changes; null when it failed (see errors). */
  status: StatusTimeResult | null;
  /** Profiled local drains (one per service): their summaries, not figures for the table. */
  cpu_profiles: CpuProfileRun[];
  memory: Omit<DrainResult, 'output'>[];
  errors: string[];
  targets: TargetCheck[];
  total_seconds: number;
}

export interface CpuProfileRun {
  service: string;
  /** The summary written, relative to the repository. */
  file: string;
  seconds: number;
  events: number;
  cpuUsPerEvent: number;
  complete: boolean;
}

/** The sandbox's default digest nonce lifetime (src/sandbox/types.ts). */
const NONCE_TTL_S = 60;
const MB = 1024 * 1024;

export interface DrainRow {
  mode: string;
  service: string;
  events: number;
  seconds: number;
  eventsPerSecond: number;
  rawEventsPerSecond: number;
  ratio: number;
  requestsPerEvent: number;
  /** Feed pages, subject GETs and subject 404s, per event. */
  feedPerEvent: number;
  subjectPerEvent: number;
  notFoundPerEvent: number;
  /** The fewest requests per event the spec allows on this backlog: the raw client's plan. */
  floorPerEvent: number;
  unauthorizedPer1000: number;
  unauthorizedPerNonceLifetime: number;
  peakRssMb: string;
  /** User+sys CPU of all feedsync processes of the drain / events. */
  cpuUsPerEvent: number;
  /** The same from the first line in the sink on: start-up left out. */
  cpuUsPerEventAfterFirstLine: number;
  /** CPU seconds per process, by role. */
  cpuByRole: string;
  /** bullmq or postgres events/s ÷ local (jsonl sink) events/s for the same service (NaN on local rows). */
  vsLocal: number;
  complete: boolean;
}

/** Events per second of every drain, keyed by `mode service`. */
function drainRates(r: Pick<BenchReport, 'drains'>): Map<string, number> {
  return new Map(
    r.drains.flatMap((d) =>
      d.perService.map((s) => [`${d.mode} ${s.service}`, s.events / d.seconds] as const),
    ),
  );
}

/** How far a figure is from its target, e.g. " (target 50: 1.9×)"; empty when met. */
function miss(value: number, target: number, met: boolean): string {
  return met ? '' : ` (target ${target}: ${(value / target).toPrecision(2)}×)`;
}

export function drainRows(r: Pick<BenchReport, 'drains' | 'raw' | 'plans'>): DrainRow[] {
  const rates = drainRates(r);
  return r.drains.flatMap((d) =>
    d.perService.map((s) => {
      const raw = r.raw.find((x) => x.service === s.service);
      const eps = s.events / d.seconds;
      return {
        mode: d.mode,
        service: s.service,
        events: s.events,
        seconds: d.seconds,
        eventsPerSecond: eps,
        rawEventsPerSecond: raw?.eventsPerSecond ?? Number.NaN,
        ratio: raw ? eps / raw.eventsPerSecond : Number.NaN,
        requestsPerEvent: s.requests / s.events,
        feedPerEvent: s.feedRequests / s.events,
        subjectPerEvent: s.subjectRequests / s.events,
        notFoundPerEvent: s.subjectNotFound / s.events,
        floorPerEvent: (r.plans[s.service]?.requests ?? Number.NaN) / s.events,
        unauthorizedPer1000: (1000 * s.unauthorized) / Math.max(1, s.requests),
        unauthorizedPerNonceLifetime: s.unauthorized / Math.max(1, Math.ceil(d.seconds / NONCE_TTL_S)),
        peakRssMb: d.peakRss.map((p) => `${p.role} ${(p.bytes / MB).toFixed(0)}`).join(', '),
        cpuUsPerEvent: d.cpuUsPerEvent ?? Number.NaN,
        cpuUsPerEventAfterFirstLine: d.cpuUsPerEventAfterFirstLine ?? Number.NaN,
        cpuByRole: d.cpu.map((c) => `${c.role} ${c.us === null ? '?' : (c.us / 1e6).toFixed(2)}`).join(', '),
        vsLocal: d.mode !== 'local' ? eps / (rates.get(`local ${s.service}`) ?? Number.NaN) : Number.NaN,
        complete: d.complete,
      };
    }),
  );
}

export function evaluate(r: BenchReport): TargetCheck[] {
  const checks: TargetCheck[] = [];
  const rows = drainRows(r);
  for (const row of rows) {
    // Postgres drains repeat the local drain with another sink: only their ratio is a target (below).
    if (row.mode === 'postgres') continue;
    const tag = `${row.mode} ${row.service}`;
    const incomplete = row.complete ? '' : ' INCOMPLETE';
    if (row.mode === 'local') {
      // Issue 12's thresholds; they replace an older issue's 0.8x for every row. BullMQ rows are
      // held against the local drain instead (below), not against the raw limit.
      const minRatio = row.service === 'workflow' ? 0.8 : 0.6;
      const met = row.complete && row.ratio >= minRatio;
      checks.push({
        target: `${tag}: drain >= ${minRatio}x raw limit`,
        figure: `${row.ratio.toFixed(2)}x (${row.eventsPerSecond.toFixed(0)} / ${row.rawEventsPerSecond.toFixed(0)} ev/s)${miss(row.ratio, minRatio, met)}${incomplete}`,
        met,
      });
      const maxCpu = row.service === 'workflow' ? 120 : 50;
      const cpuMet = row.complete && row.cpuUsPerEvent <= maxCpu;
      checks.push({
        target: `${tag}: <= ${maxCpu} µs CPU (user+sys) per event`,
        figure: `${row.cpuUsPerEvent.toFixed(0)} µs${miss(row.cpuUsPerEvent, maxCpu, cpuMet)}; after the first line ${row.cpuUsPerEventAfterFirstLine.toFixed(0)} µs${incomplete}`,
        met: cpuMet,
      });
    }
    const maxRpe = row.service === 'workflow' ? 1.02 : 0.021;
    checks.push({
      target: `${tag}: <= ${maxRpe} upstream requests per event`,
      figure:
        `${row.requestsPerEvent.toFixed(3)} (feed ${row.feedPerEvent.toFixed(3)} + subject ` +
        `${row.subjectPerEvent.toFixed(3)}, of which 404 ${row.notFoundPerEvent.toFixed(3)}; ` +
        `spec floor for this backlog ${row.floorPerEvent.toFixed(3)})`,
      met: row.requestsPerEvent <= maxRpe,
    });
    checks.push({
      target: `${tag}: <= 1 digest 401 per nonce lifetime (${NONCE_TTL_S} s)`,
      figure: `${row.unauthorizedPerNonceLifetime.toFixed(1)} (${row.unauthorizedPer1000.toFixed(1)} per 1000 requests)`,
      met: row.unauthorizedPerNonceLifetime <= 1,
    });
  }
  const peak = (d: Omit<DrainResult, 'output'>): number => Math.max(...d.peakRss.map((p) => p.bytes));
  const variants = [...new Set(r.memory.map((m) => (m.nodeArgs ?? []).join(' ')))];
  for (const flags of variants) {
    const runs = r.memory.filter((m) => (m.nodeArgs ?? []).join(' ') === flags);
    const label = flags ? ` (node ${flags})` : ' (default node flags)';
    const small = runs[0];
    const large = runs.at(-1);
    if (large) {
      const events = large.perService.reduce((a, s) => a + s.events, 0) / large.perService.length;
      const met = peak(large) <= 150 * MB;
      checks.push({
        target: `local peak RSS <= 150 MB at a ${events} backlog${label}`,
        figure: `${(peak(large) / MB).toFixed(0)} MB${miss(peak(large) / MB, 150, met)}${large.complete ? '' : ' (drain INCOMPLETE)'}`,
        met,
      });
    }
    if (small && large && small !== large) {
      const growth = peak(large) / peak(small) - 1;
      checks.push({
        target: `local peak RSS flat within 10% between the smallest and largest backlog${label}`,
        figure: `${(peak(small) / MB).toFixed(0)} -> ${(peak(large) / MB).toFixed(0)} MB (${(growth * 100).toFixed(1)}%)`,
        met: growth <= 0.1,
      });
    }
  }
  const rates = drainRates(r);
  for (const service of new Set(rows.map((row) => row.service))) {
    const bullmq = rows.find((row) => row.mode === 'bullmq' && row.service === service);
    const target = `bullmq ${service}: drain (poll + 2x work) >= 0.8x local drain`;
    if (!bullmq) {
      checks.push({ target, figure: 'no bullmq drain (see errors)', met: false });
      continue;
    }
    const met = bullmq.complete && bullmq.vsLocal >= 0.8;
    checks.push({
      target,
      figure: `${bullmq.vsLocal.toFixed(2)}x (${bullmq.eventsPerSecond.toFixed(0)} / ${(rates.get(`local ${service}`) ?? Number.NaN).toFixed(0)} ev/s)${miss(bullmq.vsLocal, 0.8, met)}${bullmq.complete ? '' : ' INCOMPLETE'}`,
      met,
    });
  }
  for (const service of new Set(rows.map((row) => row.service))) {
    const pgRow = rows.find((row) => row.mode === 'postgres' && row.service === service);
    const target = `postgres ${service}: drain into a postgres sink >= 0.8x the jsonl drain (local)`;
    if (!pgRow) {
      checks.push({ target, figure: 'no postgres drain (see errors)', met: false });
      continue;
    }
    const met = pgRow.complete && pgRow.vsLocal >= 0.8;
    checks.push({
      target,
      figure: `${pgRow.vsLocal.toFixed(2)}x (${pgRow.eventsPerSecond.toFixed(0)} / ${(rates.get(`local ${service}`) ?? Number.NaN).toFixed(0)} changes/s; ${pgRow.cpuUsPerEvent.toFixed(0)} µs CPU/change in run)${miss(pgRow.vsLocal, 0.8, met)}${pgRow.complete ? '' : ' INCOMPLETE'}`,
      met,
    });
  }
  const st = r.startup;
  const startupMet = st.medianMs <= 150;
  checks.push({
    target: 'process start -> first upstream request (run, local) <= 150 ms',
    figure: `median ${st.medianMs.toFixed(0)} ms${miss(st.medianMs, 150, startupMet)} (min ${st.minMs.toFixed(0)}, first start with an empty compile cache ${st.coldMs.toFixed(0)} ms)`,
    met: startupMet,
  });
  const status = r.status;
  const statusTarget = `feedsync status wall time on a store with ${status?.queued ?? '?'} queued changes <= 300 ms`;
  if (!status) checks.push({ target: statusTarget, figure: 'not measured (see errors)', met: false });
  else {
    const met = status.best_ms <= 300;
    checks.push({
      // The issue's figure is at 100k queued changes; a short run says it measured fewer.
      target: statusTarget + (status.queued === 100_000 ? '' : ' (issue 12: at 100000)'),
      figure: `best ${status.best_ms} ms${miss(status.best_ms, 300, met)} (all ${status.status_wall_ms.join(', ')} ms)`,
      met,
    });
  }
  const l = r.latency;
  const latencyMet = l.samples > 0 && l.p99Ms <= l.pollIntervalMs + 100;
  checks.push({
    target: `live p99 <= poll_interval_ms + 100 (${l.pollIntervalMs + 100} ms)`,
    figure: `p99 ${l.p99Ms} ms${miss(l.p99Ms, l.pollIntervalMs + 100, latencyMet)} (p50 ${l.p50Ms} ms, ${l.samples} samples)`,
    met: latencyMet,
  });
  return checks;
}

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  return [line(header), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.map(line)].join('\n');
}

export function renderTable(r: BenchReport): string {
  const parts: string[] = [];
  parts.push(
    `Machine: ${r.machine.nproc} CPUs (${r.machine.cpu_model}), node ${r.machine.node}, ${(Number(r.machine.total_mem_bytes) / 2 ** 30).toFixed(1)} GiB RAM`,
  );
  const repeats = Number(r.config.repeats ?? 1);
  parts.push(
    `\nDrain (backlog per service; one source per run${repeats > 1 ? `; the median of ${repeats} runs by CPU per event` : ''})\n`,
  );
  parts.push(
    table(
      [
        'mode',
        'service',
        'events',
        's',
        'events/s',
        'raw ev/s',
        'ratio',
        'req/event',
        'feed + subject (404)',
        '401/1000 req',
        '401/nonce life',
        'peak RSS MB',
        'CPU µs/event',
        'after 1st line',
        'CPU s by process',
        'vs local',
      ],
      drainRows(r).map((d) => [
        d.mode,
        d.service,
        String(d.events),
        d.seconds.toFixed(1),
        d.eventsPerSecond.toFixed(0),
        d.rawEventsPerSecond.toFixed(0),
        d.ratio.toFixed(2),
        d.requestsPerEvent.toFixed(3),
        `${d.feedPerEvent.toFixed(3)} + ${d.subjectPerEvent.toFixed(3)} (${d.notFoundPerEvent.toFixed(3)})`,
        d.unauthorizedPer1000.toFixed(1),
        d.unauthorizedPerNonceLifetime.toFixed(1),
        d.peakRssMb + (d.complete ? '' : ' INCOMPLETE'),
        d.cpuUsPerEvent.toFixed(0),
        d.cpuUsPerEventAfterFirstLine.toFixed(0),
        d.cpuByRole,
        Number.isNaN(d.vsLocal) ? '-' : d.vsLocal.toFixed(2),
      ]),
    ),
  );
  parts.push('\nRaw limit (same requests, concurrent keep-alive client, same digest code)\n');
  parts.push(
    table(
      ['service', 'requests', 'events', 's', 'events/s', 'req/s', '401s'],
      r.raw.map((x) => [
        x.service,
        String(x.requests),
        String(x.events),
        x.seconds.toFixed(1),
        x.eventsPerSecond.toFixed(0),
        x.requestsPerSecond.toFixed(0),
        String(x.unauthorized),
      ]),
    ),
  );
  if (r.bare_bullmq) {
    const b = r.bare_bullmq;
    parts.push(
      `\nBare BullMQ: ${b.jobs} no-op jobs, ${b.workers} workers x concurrency ${b.concurrency}: add ${b.addPerSecond.toFixed(0)} jobs/s, process ${b.processPerSecond.toFixed(0)} jobs/s`,
    );
  }
  const l = r.latency;
  parts.push(
    `\nLive latency (${l.ratePerService} events/s per service, poll_interval_ms ${l.pollIntervalMs}, ${l.windowSeconds} s window): p50 ${l.p50Ms} ms, p99 ${l.p99Ms} ms, max ${l.maxMs} ms, ${l.samples} samples`,
  );
  const st = r.startup;
  parts.push(
    `\nStart-up (spawn -> first upstream request, run, local; ${st.runs} runs): median ${st.medianMs.toFixed(0)} ms, min ${st.minMs.toFixed(0)} ms, first (empty compile cache) ${st.coldMs.toFixed(0)} ms`,
  );
  if (r.status)
    parts.push(
      `\nStatus (\`feedsync status\` on a store with ${r.status.queued} queued changes; ${r.status.status_wall_ms.length} runs): best ${r.status.best_ms} ms, all ${r.status.status_wall_ms.join(', ')} ms`,
    );
  for (const p of r.cpu_profiles)
    parts.push(
      `\nCPU profile ${p.service}: ${p.file} (a separate local drain under --cpu-prof: ${p.events} events in ${p.seconds.toFixed(1)} s, ${p.cpuUsPerEvent.toFixed(0)} µs CPU/event, slowed by the profiler and not in the tables)`,
    );
  parts.push('\nMemory (local run, both services)\n');
  parts.push(
    table(
      ['node flags', 'backlog/service', 'events', 's', 'peak RSS MB', 'complete'],
      r.memory.map((m) => [
        (m.nodeArgs ?? []).join(' ') || 'default',
        String(m.perService[0]?.events ?? 0),
        String(m.perService.reduce((a, s) => a + s.events, 0)),
        m.seconds.toFixed(1),
        (Math.max(...m.peakRss.map((p) => p.bytes)) / MB).toFixed(0),
        String(m.complete),
      ]),
    ),
  );
  parts.push('\nTargets\n');
  parts.push(
    table(
      ['target', 'figure', 'met'],
      r.targets.map((t) => [t.target, t.figure, t.met ? 'yes' : 'NO']),
    ),
  );
  if (r.errors.length) parts.push(`\nErrors: ${r.errors.join('; ')}`);
  parts.push(`\nTotal ${r.total_seconds.toFixed(0)} s\n`);
  return parts.join('\n');
}
