// Turns the measurements into derived figures, checks them against the issue's targets and renders
// the table printed at the end of `npm run bench`.
import type { BareBullmqResult } from './bare-bullmq.js';
import type { DrainResult } from './drain.js';
import type { LatencyResult } from './latency.js';
import type { RawResult } from './raw-limit.js';
import type { QueuedDrainResult, RedisMemoryResult } from './redis-memory.js';
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
  /** `poll` alone queueing each service's backlog on a fresh Redis (redis-memory.ts). */
  redis_memory: RedisMemoryResult[];
  /** `work` alone on the backlog `poll` queued (issue 29: does a second `work` add anything). */
  queued_drains?: QueuedDrainResult[];
  /** The local drains run in rounds with the scaled mode's (the reference of scaled_vs_local). */
  scaled_reference?: Omit<DrainResult, 'output'>[];
  /** Issue 29's block: the scaled mode's drains, CPU and Redis memory against the local drain. */
  scaled_vs_local: ScaledVsLocal[];
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
  /** Bullmq: CPU per event of the feedsync processes and the redis-server together (NaN otherwise). */
  cpuUsPerEventWithRedis: number;
  /** bullmq or postgres events/s ÷ local (jsonl sink) events/s for the same service (NaN on local rows). */
  vsLocal: number;
  complete: boolean;
}

/** A drain's mode as the tables name it: bullmq drains say how many `work` processes ran. */
export function modeLabel(d: Pick<DrainResult, 'mode' | 'works'>): string {
  return d.mode === 'bullmq' ? `bullmq poll+${d.works ?? 2} work` : d.mode;
}

/** Events per second of every drain, keyed by `mode service` (the mode as modeLabel names it). */
function drainRates(r: Pick<BenchReport, 'drains'>): Map<string, number> {
  return new Map(
    r.drains.flatMap((d) =>
      d.perService.map((s) => [`${modeLabel(d)} ${s.service}`, s.events / d.seconds] as const),
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
        mode: modeLabel(d),
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
        cpuByRole: [
          ...d.cpu.map((c) => ({ role: c.role, us: c.us })),
          ...(d.redisCpuUs === undefined ? [] : [{ role: 'redis', us: d.redisCpuUs }]),
        ]
          .map((c) => `${c.role} ${c.us === null ? '?' : (c.us / 1e6).toFixed(2)}`)
          .join(', '),
        cpuUsPerEventWithRedis: d.cpuUsPerEventWithRedis ?? Number.NaN,
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
  checks.push(...r.scaled_vs_local.flatMap((x) => x.targets));
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

/** One BullMQ drain of issue 29's block, against the local drain of the same service. */
export interface ScaledDrain {
  works: number;
  eventsPerSecond: number;
  /** ÷ the local drain's events/s. */
  vsLocal: number;
  /** CPU µs per event of poll + every work, and of those with the redis-server. */
  cpuUsPerEvent: number;
  cpuUsPerEventWithRedis: number;
  /** ÷ the local drain's CPU µs per event. */
  cpuVsLocal: number;
  cpuWithRedisVsLocal: number;
  /** Spawn → the first change in the sink, s, and events/s from then on ÷ the local drain's same. */
  firstLineSeconds: number;
  afterFirstVsLocal: number;
  complete: boolean;
}

export interface ScaledVsLocal {
  service: string;
  localEventsPerSecond: number;
  localCpuUsPerEvent: number;
  /** Spawn → the first change in the sink, s. */
  localFirstLineSeconds: number;
  /** By number of `work` processes (1, then 2). */
  bullmq: ScaledDrain[];
  /** poll + 2 work events/s ÷ poll + 1 work events/s. */
  twoVsOneWork: number;
  /** Redis used_memory per queued change with `poll` alone; null when not measured. */
  redisBytesPerQueuedChange: number | null;
  /** `work` processes alone draining the backlog `poll` queued first (by number of them). */
  queuedDrains: QueuedDrainResult[];
  targets: TargetCheck[];
}

/** Issue 29's targets for the scaled mode. */
const SCALED = {
  drainVsLocal: 0.8,
  cpuWithRedisVsLocal: 1.5,
  /** Redis used_memory per queued change the issue measured before it (lower is the target). */
  bytesPerQueuedChangeBefore: 1014,
};

/**
 * Issue 29's block: BullMQ with 1 and 2 `work` processes against the local drain of the same
 * service (same sandbox, same backlog, same run), and the Redis memory of a queued backlog.
 */
export function scaledVsLocal(
  drains: Omit<DrainResult, 'output'>[],
  memory: RedisMemoryResult[],
  queued: QueuedDrainResult[] = [],
): ScaledVsLocal[] {
  const services = [...new Set(drains.flatMap((d) => d.perService.map((s) => s.service)))];
  const only = (d: Omit<DrainResult, 'output'>, service: string): boolean =>
    d.perService.length === 1 && d.perService[0]!.service === service;
  return services.flatMap((service) => {
    const local = drains.find((d) => d.mode === 'local' && only(d, service));
    const bullmqs = drains.filter((d) => d.mode === 'bullmq' && only(d, service));
    if (!local || bullmqs.length === 0) return [];
    const rate = (d: Omit<DrainResult, 'output'>): number => d.perService[0]!.events / d.seconds;
    // Start-up left out (a lines-per-second rate: the first line is in by then).
    const afterFirst = (d: Omit<DrainResult, 'output'>): number =>
      d.firstLineSeconds === null ? Number.NaN : d.perService[0]!.events / (d.seconds - d.firstLineSeconds);
    const localRate = rate(local);
    const localCpu = local.cpuUsPerEvent ?? Number.NaN;
    const bullmq = bullmqs
      .map((d) => ({
        works: d.works ?? 2,
        eventsPerSecond: rate(d),
        vsLocal: rate(d) / localRate,
        cpuUsPerEvent: d.cpuUsPerEvent ?? Number.NaN,
        cpuUsPerEventWithRedis: d.cpuUsPerEventWithRedis ?? Number.NaN,
        cpuVsLocal: (d.cpuUsPerEvent ?? Number.NaN) / localCpu,
        cpuWithRedisVsLocal: (d.cpuUsPerEventWithRedis ?? Number.NaN) / localCpu,
        firstLineSeconds: d.firstLineSeconds ?? Number.NaN,
        afterFirstVsLocal: afterFirst(d) / afterFirst(local),
        complete: d.complete,
      }))
      .sort((a, b) => a.works - b.works);
    const one = bullmq.find((b) => b.works === 1);
    const two = bullmq.find((b) => b.works === 2);
    const mem = memory.find((m) => m.service === service);
    const row: Omit<ScaledVsLocal, 'targets'> = {
      service,
      localEventsPerSecond: localRate,
      localFirstLineSeconds: local.firstLineSeconds ?? Number.NaN,
      localCpuUsPerEvent: localCpu,
      bullmq,
      twoVsOneWork: one && two ? two.eventsPerSecond / one.eventsPerSecond : Number.NaN,
      redisBytesPerQueuedChange: mem ? mem.bytesPerQueuedChange : null,
      queuedDrains: queued.filter((q) => q.service === service).sort((a, b) => a.works - b.works),
    };
    return [{ ...row, targets: scaledChecks(row, local.complete, mem) }];
  });
}

function scaledChecks(
  x: Omit<ScaledVsLocal, 'targets'>,
  localComplete: boolean,
  mem: RedisMemoryResult | undefined,
): TargetCheck[] {
  const checks: TargetCheck[] = [];
  const tag = `bullmq ${x.service}`;
  const incomplete = (...complete: boolean[]): string => (complete.every(Boolean) ? '' : ' INCOMPLETE');
  const one = x.bullmq.find((b) => b.works === 1);
  const two = x.bullmq.find((b) => b.works === 2);
  const absent = (target: string): TargetCheck => ({
    target,
    figure: 'not measured (see errors)',
    met: false,
  });
  const drainTarget = `${tag}: drain (poll + 1 work) >= ${SCALED.drainVsLocal}x local drain`;
  if (!one) checks.push(absent(drainTarget));
  else {
    const met = one.complete && localComplete && one.vsLocal >= SCALED.drainVsLocal;
    checks.push({
      target: drainTarget,
      figure: `${one.vsLocal.toFixed(2)}x (${one.eventsPerSecond.toFixed(0)} / ${x.localEventsPerSecond.toFixed(0)} ev/s)${miss(one.vsLocal, SCALED.drainVsLocal, met)}${incomplete(one.complete, localComplete)}`,
      met,
    });
  }
  const moreTarget = `${tag}: drain (poll + 2 work) > drain (poll + 1 work)`;
  if (!one || !two) checks.push(absent(moreTarget));
  else
    checks.push({
      target: moreTarget,
      figure: `${x.twoVsOneWork.toFixed(2)}x (${two.eventsPerSecond.toFixed(0)} / ${one.eventsPerSecond.toFixed(0)} ev/s)${incomplete(one.complete, two.complete)}`,
      met: one.complete && two.complete && x.twoVsOneWork > 1,
    });
  for (const b of x.bullmq) {
    const met = b.complete && localComplete && b.cpuWithRedisVsLocal <= SCALED.cpuWithRedisVsLocal;
    checks.push({
      target: `${tag}: CPU per event of poll + ${b.works} work + Redis <= ${SCALED.cpuWithRedisVsLocal}x local`,
      figure:
        `${b.cpuWithRedisVsLocal.toFixed(2)}x (${b.cpuUsPerEventWithRedis.toFixed(0)} / ${x.localCpuUsPerEvent.toFixed(0)} µs)` +
        `${miss(b.cpuWithRedisVsLocal, SCALED.cpuWithRedisVsLocal, met)}; feedsync processes only ` +
        `${b.cpuVsLocal.toFixed(2)}x (${b.cpuUsPerEvent.toFixed(0)} µs)${incomplete(b.complete, localComplete)}`,
      met,
    });
  }
  const memTarget = `${tag}: Redis memory per queued change < ${SCALED.bytesPerQueuedChangeBefore} bytes (the issue's figure before)`;
  if (!mem) checks.push(absent(memTarget));
  else {
    const met = mem.complete && mem.bytesPerQueuedChange < SCALED.bytesPerQueuedChangeBefore;
    checks.push({
      target: memTarget,
      figure:
        `${mem.bytesPerQueuedChange.toFixed(0)} bytes (used_memory ${(mem.usedMemoryBefore / MB).toFixed(1)} -> ` +
        `${(mem.usedMemoryAfter / MB).toFixed(1)} MB for ${mem.expected} changes)` +
        (mem.complete
          ? ''
          : ` INCOMPLETE (cursor ${mem.cursor} of ${mem.lastEventId}, ${mem.queued} queued)`),
      met,
    });
  }
  return checks;
}

/** Issue 29's block, one column per service; every ratio with its target and met or missed. */
export function renderScaled(rows: ScaledVsLocal[]): string {
  if (rows.length === 0) return '';
  const verdict = (met: boolean | undefined): string => (met === undefined ? '' : met ? ' met' : ' missed');
  const find = (x: ScaledVsLocal, prefix: string): boolean | undefined =>
    x.targets.find((t) => t.target.startsWith(`bullmq ${x.service}: ${prefix}`))?.met;
  const works = [...new Set(rows.flatMap((x) => x.bullmq.map((b) => b.works)))].sort((a, b) => a - b);
  const cell = (x: ScaledVsLocal, w: number, f: (b: ScaledDrain) => string): string => {
    const b = x.bullmq.find((y) => y.works === w);
    return b ? f(b) + (b.complete ? '' : ' INCOMPLETE') : '-';
  };
  const lines: string[][] = [
    ['local drain, events/s', '', ...rows.map((x) => x.localEventsPerSecond.toFixed(0))],
    ...works.map((w) => [
      `poll + ${w} work, events/s (÷ local)`,
      w === 1 ? `>= ${SCALED.drainVsLocal}x` : '',
      ...rows.map((x) =>
        cell(
          x,
          w,
          (b) =>
            `${b.eventsPerSecond.toFixed(0)} (${b.vsLocal.toFixed(2)}x)${w === 1 ? verdict(find(x, 'drain (poll + 1 work)')) : ''}`,
        ),
      ),
    ]),
    [
      'first change delivered, s after spawn: local; poll + 1 work; poll + 2 work',
      '',
      ...rows.map((x) =>
        [x.localFirstLineSeconds, ...works.map((w) => x.bullmq.find((b) => b.works === w)?.firstLineSeconds)]
          .map((s) => (s === undefined || Number.isNaN(s) ? '-' : s.toFixed(2)))
          .join('; '),
      ),
    ],
    [
      'from the first change on, events/s ÷ local: poll + 1 work; poll + 2 work',
      '',
      ...rows.map((x) =>
        works.map((w) => cell(x, w, (b) => `${b.afterFirstVsLocal.toFixed(2)}x`)).join('; '),
      ),
    ],
    [
      'work alone on the queued backlog, events/s: 1 work; 2 work (÷ 1 work)',
      '',
      ...rows.map((x) => {
        const [one, two] = [1, 2].map((w) => x.queuedDrains.find((q) => q.works === w));
        if (!one || !two) return '-';
        const mark = (q: QueuedDrainResult): string => (q.complete ? '' : ' INCOMPLETE');
        return `${one.eventsPerSecond.toFixed(0)}${mark(one)}; ${two.eventsPerSecond.toFixed(0)}${mark(two)} (${(two.eventsPerSecond / one.eventsPerSecond).toFixed(2)}x)`;
      }),
    ],
    [
      'poll + 2 work ÷ poll + 1 work, events/s',
      '> 1x',
      ...rows.map((x) => `${x.twoVsOneWork.toFixed(2)}x${verdict(find(x, 'drain (poll + 2 work)'))}`),
    ],
    ['local CPU µs/event', '', ...rows.map((x) => x.localCpuUsPerEvent.toFixed(0))],
    ...works.map((w) => [
      `poll + ${w} work CPU µs/event: feedsync; + Redis (÷ local)`,
      `<= ${SCALED.cpuWithRedisVsLocal}x with Redis`,
      ...rows.map((x) =>
        cell(
          x,
          w,
          (b) =>
            `${b.cpuUsPerEvent.toFixed(0)} (${b.cpuVsLocal.toFixed(2)}x); ${b.cpuUsPerEventWithRedis.toFixed(0)} ` +
            `(${b.cpuWithRedisVsLocal.toFixed(2)}x)${verdict(find(x, `CPU per event of poll + ${w} work`))}`,
        ),
      ),
    ]),
    [
      'Redis used_memory per queued change, bytes (poll alone)',
      `< ${SCALED.bytesPerQueuedChangeBefore}`,
      ...rows.map((x) =>
        x.redisBytesPerQueuedChange === null
          ? 'not measured, missed'
          : `${x.redisBytesPerQueuedChange.toFixed(0)}${verdict(find(x, 'Redis memory'))}`,
      ),
    ],
  ];
  return table(['scaled mode vs local', 'target', ...rows.map((x) => x.service)], lines);
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
        d.cpuUsPerEvent.toFixed(0) +
          (Number.isNaN(d.cpuUsPerEventWithRedis)
            ? ''
            : `; ${d.cpuUsPerEventWithRedis.toFixed(0)} with Redis`),
        d.cpuUsPerEventAfterFirstLine.toFixed(0),
        d.cpuByRole,
        Number.isNaN(d.vsLocal) ? '-' : d.vsLocal.toFixed(2),
      ]),
    ),
  );
  if (r.scaled_vs_local.length) {
    parts.push(
      '\nScaled mode vs local (same service and backlog; CPU of poll + every work, then with the redis-server too)\n',
    );
    parts.push(renderScaled(r.scaled_vs_local));
  }
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
