// `npm run bench`: start-up, drain, raw limit, bare BullMQ, the scaled mode vs local (issue 29),
// live latency and memory, in one run; prints a table and writes test/bench/results/latest.json. Sizes come from env vars so a short run is
// possible, but the defaults are the issue's (BENCH_BACKLOG=50000, BENCH_MEM_BACKLOGS=10000,100000,
// BENCH_STATUS_QUEUED=100000: the queued changes in the store `feedsync status` is timed on;
// BENCH_REPEATS=3: runs per drain, the median by CPU per event is reported).
// Besides latest.json it writes test/bench/results/cpu-profile-<service>.txt: the top self-time
// functions of one extra local drain per service under `node --cpu-prof` (not in the tables).
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, freemem, tmpdir, totalmem } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ServiceName } from '../../dist/sandbox/types.js';
import { measureBareBullmq, type BareBullmqResult } from './bare-bullmq.js';
import { SandboxControl } from './control.js';
import { inRounds, medianByCpu, runDrain, type DrainMode, type DrainResult } from './drain.js';
import { measureLatency, type LatencyResult } from './latency.js';
import { benchSource, measureRaw, planRequests, type RawResult, type RequestPlan } from './raw-limit.js';
import { startBenchPostgres, type BenchPostgres } from './postgres.js';
import { startBenchRedis } from './redis.js';
import {
  drainQueued,
  measureQueuedMemory,
  type QueuedDrainResult,
  type RedisMemoryResult,
} from './redis-memory.js';
import { CLI_PATH, startSandboxProcess } from './procs.js';
import { topSelfTime } from './profile.js';
import {
  drainRows,
  evaluate,
  renderTable,
  scaledVsLocal,
  type BenchReport,
  type CpuProfileRun,
} from './report.js';
import { measureStartup } from './startup.js';
import { statusTime, type StatusTimeResult } from './status-time.js';

const SERVICES: ServiceName[] = ['scheduling', 'workflow'];
const env = (name: string, fallback: number): number => {
  const v = process.env[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer, got "${v}"`);
  return n;
};

const cfg = {
  seed: env('BENCH_SEED', 1),
  backlog: env('BENCH_BACKLOG', 50_000),
  memBacklogs: (process.env.BENCH_MEM_BACKLOGS ?? '10000,100000').split(',').map(Number),
  rawConcurrency: env('BENCH_RAW_CONCURRENCY', 16),
  bareJobs: env('BENCH_BARE_JOBS', 20_000),
  latencyWindowS: env('BENCH_LATENCY_WINDOW_S', 20),
  drainTimeoutS: env('BENCH_DRAIN_TIMEOUT_S', 240),
  startupRuns: Math.max(2, env('BENCH_STARTUP_RUNS', 11)),
  statusQueued: env('BENCH_STATUS_QUEUED', 100_000),
  repeats: Math.max(1, env('BENCH_REPEATS', 3)),
  liveRate: 20,
  pollIntervalMs: 1000,
};

function machine(): Record<string, string> {
  const sh = (cmd: string, args: string[]): string => {
    try {
      return execFileSync(cmd, args, { encoding: 'utf8' }).trim();
    } catch {
      return 'unavailable';
    }
  };
  const cpuModel =
    /model name\s*:\s*(.*)/.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? cpus()[0]?.model;
  return {
    nproc: sh('nproc', []),
    free_h: sh('free', ['-h']),
    node: process.version,
    cpu_model: cpuModel ?? 'unknown',
    total_mem_bytes: String(totalmem()),
    free_mem_bytes_at_start: String(freemem()),
    postgres: postgresVersion,
  };
}

/** The server the postgres drains ran against, for the report's machine section. */
let postgresVersion = 'not started';

const RESULTS_DIR = fileURLToPath(new URL('../../test/bench/results/', import.meta.url));
const REPO_DIR = fileURLToPath(new URL('../../', import.meta.url));

function log(msg: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
}

async function drainPhase(work: string): Promise<{
  plans: Record<string, RequestPlan>;
  raw: RawResult[];
  drains: DrainResult[];
  scaledReference: DrainResult[];
  profiles: CpuProfileRun[];
  bare?: BareBullmqResult;
  redisMemory: RedisMemoryResult[];
  queuedDrains: QueuedDrainResult[];
  errors: string[];
}> {
  const errors: string[] = [];
  log(`sandbox with a backlog of ${cfg.backlog} events per service`);
  const { child, info } = await startSandboxProcess({ backlog: cfg.backlog, rate: 0, seed: cfg.seed });
  const control = new SandboxControl(info.control_url);
  const plans: Record<string, RequestPlan> = {};
  const raw: RawResult[] = [];
  const drains: DrainResult[] = [];
  /** The local drains run in rounds with the scaled mode's: what scaled_vs_local holds it against. */
  const scaledReference: DrainResult[] = [];
  const profiles: CpuProfileRun[] = [];
  const redisMemory: RedisMemoryResult[] = [];
  const queuedDrains: QueuedDrainResult[] = [];
  let bare: BareBullmqResult | undefined;
  try {
    const events = Object.fromEntries(
      await Promise.all(SERVICES.map(async (s) => [s, await control.events(s)])),
    );
    for (const service of SERVICES) {
      const source = benchSource(service, info[`${service}_base_url`], info, cfg.pollIntervalMs);
      log(`planning the requests feedsync makes for ${service}`);
      plans[service] = await planRequests(source, 100_000);
      log(
        `raw limit for ${service} (${plans[service].requests.length} requests, concurrency ${cfg.rawConcurrency})`,
      );
      // Best of two: a limit measured while something else held the CPU would flatter the ratio.
      const runs = [
        await measureRaw(source, plans[service], cfg.rawConcurrency),
        await measureRaw(source, plans[service], cfg.rawConcurrency),
      ];
      raw.push(runs.reduce((a, b) => (b.eventsPerSecond > a.eventsPerSecond ? b : a)));
    }
    const drainOnce = async (
      mode: DrainMode,
      service: ServiceName,
      dir: string,
      extra: { works?: number; postgresUrl?: string; postgresSchema?: string; nodeArgs?: string[] } = {},
    ): Promise<DrainResult> => {
      log(
        `drain ${mode} ${service}${extra.works ? ` poll + ${extra.works} work` : ''}${extra.nodeArgs ? ` ${extra.nodeArgs.join(' ')}` : ''}`,
      );
      const r = await runDrain({
        mode,
        services: [service],
        info,
        control,
        events,
        dir,
        timeoutMs: cfg.drainTimeoutS * 1000,
        pollIntervalMs: cfg.pollIntervalMs,
        ...extra,
      });
      log(`  ${r.complete ? 'complete' : `INCOMPLETE (${r.missing} missing)`} in ${r.seconds.toFixed(1)} s`);
      return r;
    };
    // The median of `repeats` runs by CPU per event: on a shared 2-core machine one run can be
    // 15 % off either way. Drains compared with each other run in rounds (inRounds). Every run's
    // figures are kept in latest.json.
    type DrainPlan = { mode: DrainMode; works?: number; postgresUrl?: string };
    const drain = async (service: ServiceName, plans: DrainPlan[]): Promise<DrainResult[]> => {
      const runs = await inRounds(plans, cfg.repeats, ({ mode, ...extra }, i) =>
        drainOnce(mode, service, join(work, `drain-${mode}${extra.works ?? ''}-${service}-${i}`), {
          ...extra,
          // Each postgres run starts from an empty mirror of its own.
          ...(extra.postgresUrl ? { postgresSchema: `drain_${service}_${i}` } : {}),
        }),
      );
      return runs.map((r) => ({
        ...medianByCpu(r),
        runs: r.map((x) => ({
          seconds: x.seconds,
          cpuUsPerEvent: x.cpuUsPerEvent,
          ...(x.cpuUsPerEventWithRedis === undefined
            ? {}
            : { cpuUsPerEventWithRedis: x.cpuUsPerEventWithRedis }),
          complete: x.complete,
        })),
      }));
    };
    for (const service of SERVICES) drains.push(...(await drain(service, [{ mode: 'local' }])));
    // Profiled after the timed drains, in runs of their own: the profiler slows the process down.
    for (const service of SERVICES) {
      try {
        const dir = join(work, `profile-${service}`);
        const r = await drainOnce('local', service, dir, {
          nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${join(dir, 'prof')}`],
        });
        profiles.push(writeProfileSummary(service, r, join(dir, 'prof')));
      } catch (err) {
        errors.push(`cpu profile ${service}: ${String(err)}`);
      }
    }
    // The same local drain with a postgres sink instead of the jsonl one (issue 23: >= 0.8x).
    let postgres: BenchPostgres | undefined;
    try {
      postgres = await startBenchPostgres();
      postgresVersion = postgres.version;
      log(`postgres sink drains (${postgres.version.split(' on ')[0]}, durable defaults)`);
      for (const service of SERVICES)
        drains.push(...(await drain(service, [{ mode: 'postgres', postgresUrl: postgres.url }])));
    } catch (err) {
      errors.push(`postgres: ${String(err)}`);
    } finally {
      await postgres?.stop();
    }
    try {
      // Issue 29: poll + 1 work against the local drain, and whether a second work adds to it. Each
      // bullmq run has a fresh Redis of its own (runDrain). Held against a local drain run in the
      // same rounds, not the one above, minutes earlier.
      for (const service of SERVICES) {
        const [local, ...bullmq] = await drain(service, [
          { mode: 'local' },
          { mode: 'bullmq', works: 1 },
          { mode: 'bullmq', works: 2 },
        ]);
        scaledReference.push(local!);
        drains.push(...bullmq);
      }
      for (const service of SERVICES) {
        log(`redis memory: poll alone queues the ${service} backlog on a fresh Redis`);
        const m = await measureQueuedMemory({
          service,
          info,
          control,
          events: events[service] ?? [],
          dir: join(work, `redis-memory-${service}`),
          timeoutMs: cfg.drainTimeoutS * 1000,
          pollIntervalMs: cfg.pollIntervalMs,
        });
        log(
          `  ${m.complete ? 'complete' : `INCOMPLETE (cursor ${m.cursor} of ${m.lastEventId}, ${m.queued} of ${m.expected} queued)`} in ${m.seconds.toFixed(1)} s: ${m.bytesPerQueuedChange.toFixed(0)} bytes per queued change`,
        );
        redisMemory.push(m);
        for (const works of [1, 2]) {
          log(`work alone: ${works} work drain the ${service} backlog poll queued`);
          const q = await drainQueued({
            service,
            works,
            info,
            control,
            events: events[service] ?? [],
            dir: join(work, `queued-${works}-${service}`),
            timeoutMs: cfg.drainTimeoutS * 1000,
            pollIntervalMs: cfg.pollIntervalMs,
          });
          log(
            `  ${q.complete ? 'complete' : 'INCOMPLETE'} in ${q.seconds.toFixed(1)} s: ${q.eventsPerSecond.toFixed(0)} events/s`,
          );
          queuedDrains.push(q);
        }
      }
    } catch (err) {
      errors.push(`bullmq: ${String(err)}`);
    }
    const redis = await startBenchRedis();
    try {
      log(`bare BullMQ: ${cfg.bareJobs} no-op jobs`);
      bare = await measureBareBullmq(redis.url, {
        jobs: cfg.bareJobs,
        workers: 2,
        concurrency: 4,
        timeoutMs: 180_000,
      });
    } catch (err) {
      errors.push(`bare bullmq: ${String(err)}`);
    } finally {
      await redis.stop();
    }
  } finally {
    await child.stop();
  }
  return { plans, raw, drains, scaledReference, profiles, bare, redisMemory, queuedDrains, errors };
}

/** test/bench/results/cpu-profile-<service>.txt from a profiled local drain. */
function writeProfileSummary(service: ServiceName, r: DrainResult, profDir: string): CpuProfileRun {
  const row = drainRows({ drains: [r], raw: [], plans: {} })[0]!;
  const run: CpuProfileRun = {
    service,
    file: relative(REPO_DIR, join(RESULTS_DIR, `cpu-profile-${service}.txt`)),
    seconds: r.seconds,
    events: row.events,
    cpuUsPerEvent: row.cpuUsPerEvent,
    complete: r.complete,
  };
  const about = [
    `npm run bench, ${new Date().toISOString()}: local drain of ${service}, json, expand, jsonl sink, node ${process.version}`,
    `this profiled run: ${row.events} events in ${r.seconds.toFixed(1)} s (${row.eventsPerSecond.toFixed(0)} ev/s), ` +
      `${row.cpuUsPerEvent.toFixed(0)} µs CPU/event (${row.cpuUsPerEventAfterFirstLine.toFixed(0)} after the first line)` +
      `${r.complete ? '' : `, INCOMPLETE (${r.missing} missing)`}`,
    "The profiler slows the process down: these figures are NOT the bench table's, which come from",
    'a separate unprofiled drain (test/bench/results/latest.json).',
  ];
  writeFileSync(join(RESULTS_DIR, `cpu-profile-${service}.txt`), topSelfTime(profDir, 10, about));
  return run;
}

async function statusPhase(work: string, errors: string[]): Promise<StatusTimeResult | null> {
  log(`feedsync status on a store with ${cfg.statusQueued} queued changes, 3 timed runs`);
  const dir = join(work, 'status');
  mkdirSync(dir, { recursive: true });
  try {
    return await statusTime({ count: cfg.statusQueued, dist: dirname(CLI_PATH), dir, runs: 3 });
  } catch (err) {
    errors.push(`status: ${String(err)}`);
    return null;
  }
}

/** The node flags of the memory runs: none (the daemon restarts itself with the young-generation size the image sets in NODE_OPTIONS). */
const MEMORY_VARIANTS: string[][] = [[]];

async function memoryPhase(work: string): Promise<DrainResult[]> {
  const out: DrainResult[] = [];
  for (const nodeArgs of MEMORY_VARIANTS)
    for (const backlog of cfg.memBacklogs) {
      log(
        `memory: local drain of ${backlog} events per service (both services, one run process) ${nodeArgs.join(' ')}`,
      );
      const { child, info } = await startSandboxProcess({ backlog, rate: 0, seed: cfg.seed });
      try {
        const control = new SandboxControl(info.control_url);
        const events = Object.fromEntries(
          await Promise.all(SERVICES.map(async (s) => [s, await control.events(s)])),
        );
        const r = await runDrain({
          mode: 'local',
          services: SERVICES,
          info,
          control,
          events,
          dir: join(work, `memory-${backlog}-${nodeArgs.length}`),
          timeoutMs: cfg.drainTimeoutS * 2000,
          pollIntervalMs: cfg.pollIntervalMs,
          nodeArgs,
        });
        out.push({ ...r, nodeArgs });
        log(
          `  ${r.complete ? 'complete' : `INCOMPLETE (${r.missing} missing)`} in ${r.seconds.toFixed(1)} s`,
        );
      } finally {
        await child.stop();
      }
    }
  return out;
}

async function latencyPhase(work: string): Promise<LatencyResult> {
  log(`live latency: ${cfg.liveRate} events/s per service, poll_interval_ms ${cfg.pollIntervalMs}`);
  const { child, info } = await startSandboxProcess({ backlog: 0, rate: 0, seed: cfg.seed });
  try {
    return await measureLatency({
      info,
      control: new SandboxControl(info.control_url),
      dir: join(work, 'latency'),
      rate: cfg.liveRate,
      pollIntervalMs: cfg.pollIntervalMs,
      warmupSeconds: 3,
      windowSeconds: cfg.latencyWindowS,
    });
  } finally {
    await child.stop();
  }
}

async function main(): Promise<void> {
  const started = Date.now();
  const work = mkdtempSync(join(tmpdir(), 'feedsync-bench-'));
  try {
    log(`start-up: spawn -> first upstream request of feedsync run, ${cfg.startupRuns} runs`);
    const startup = await measureStartup(join(work, 'startup'), cfg.startupRuns);
    mkdirSync(RESULTS_DIR, { recursive: true });
    const drain = await drainPhase(work);
    const latency = await latencyPhase(work);
    const memory = await memoryPhase(work);
    const status = await statusPhase(work, drain.errors);
    const report: BenchReport = {
      generated_at: new Date().toISOString(),
      command: 'npm run bench',
      config: cfg,
      machine: machine(),
      plans: Object.fromEntries(
        Object.entries(drain.plans).map(([k, p]) => [
          k,
          {
            events: p.events,
            feed_pages: p.feedPages,
            subject_gets: p.subjectGets,
            requests: p.requests.length,
          },
        ]),
      ),
      raw: drain.raw,
      drains: drain.drains.map(({ output: _output, ...d }) => d),
      bare_bullmq: drain.bare ?? null,
      latency,
      startup,
      status,
      cpu_profiles: drain.profiles,
      memory: memory.map(({ output: _output, ...d }) => d),
      redis_memory: drain.redisMemory,
      queued_drains: drain.queuedDrains,
      scaled_reference: drain.scaledReference.map(({ output: _output, ...d }) => d),
      scaled_vs_local: scaledVsLocal(
        [...drain.scaledReference, ...drain.drains],
        drain.redisMemory,
        drain.queuedDrains,
      ),
      errors: drain.errors,
      targets: [],
      total_seconds: (Date.now() - started) / 1000,
    };
    report.targets = evaluate(report);
    const out = join(RESULTS_DIR, 'latest.json');
    writeFileSync(out, `${JSON.stringify(report, null, 2)}\n`);
    process.stdout.write(renderTable(report));
    process.stdout.write(`\nwritten to ${out}\n`);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
