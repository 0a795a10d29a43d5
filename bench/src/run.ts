// `npm run bench`: start-up, drain, raw limit, bare BullMQ, live latency and memory, in one run; prints a
// table and writes test/bench/results/latest.json. Sizes come from env vars so a short run is
// possible, but the defaults are the issue's (BENCH_BACKLOG=50000, BENCH_MEM_BACKLOGS=10000,100000).
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, freemem, tmpdir, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ServiceName } from '../../dist/sandbox/types.js';
import { measureBareBullmq, type BareBullmqResult } from './bare-bullmq.js';
import { SandboxControl } from './control.js';
import { runDrain, type DrainMode, type DrainResult } from './drain.js';
import { measureLatency, type LatencyResult } from './latency.js';
import { benchSource, measureRaw, planRequests, type RawResult, type RequestPlan } from './raw-limit.js';
import { startBenchRedis } from './redis.js';
import { startSandboxProcess } from './procs.js';
import { evaluate, renderTable, type BenchReport } from './report.js';
import { measureStartup } from './startup.js';

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
  };
}

function log(msg: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
}

async function drainPhase(work: string): Promise<{
  plans: Record<string, RequestPlan>;
  raw: RawResult[];
  drains: DrainResult[];
  bare?: BareBullmqResult;
  errors: string[];
}> {
  const errors: string[] = [];
  log(`sandbox with a backlog of ${cfg.backlog} events per service`);
  const { child, info } = await startSandboxProcess({ backlog: cfg.backlog, rate: 0, seed: cfg.seed });
  const control = new SandboxControl(info.control_url);
  const plans: Record<string, RequestPlan> = {};
  const raw: RawResult[] = [];
  const drains: DrainResult[] = [];
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
    const drain = async (mode: DrainMode, service: ServiceName, redisUrl?: string): Promise<void> => {
      log(`drain ${mode} ${service}`);
      const r = await runDrain({
        mode,
        services: [service],
        info,
        control,
        events,
        dir: join(work, `drain-${mode}-${service}`),
        timeoutMs: cfg.drainTimeoutS * 1000,
        pollIntervalMs: cfg.pollIntervalMs,
        ...(redisUrl ? { redisUrl } : {}),
      });
      drains.push(r);
      log(`  ${r.complete ? 'complete' : `INCOMPLETE (${r.missing} missing)`} in ${r.seconds.toFixed(1)} s`);
    };
    for (const service of SERVICES) await drain('local', service);
    const redis = await startBenchRedis();
    try {
      for (const service of SERVICES) await drain('bullmq', service, redis.url);
      log(`bare BullMQ: ${cfg.bareJobs} no-op jobs`);
      bare = await measureBareBullmq(redis.url, {
        jobs: cfg.bareJobs,
        workers: 2,
        concurrency: 4,
        timeoutMs: 180_000,
      });
    } catch (err) {
      errors.push(`bullmq: ${String(err)}`);
    } finally {
      await redis.stop();
    }
  } finally {
    await child.stop();
  }
  return { plans, raw, drains, bare, errors };
}

/** The node flags of the memory runs: none, as the Docker image and Helm chart run it. */
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
    const drain = await drainPhase(work);
    const latency = await latencyPhase(work);
    const memory = await memoryPhase(work);
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
      memory: memory.map(({ output: _output, ...d }) => d),
      errors: drain.errors,
      targets: [],
      total_seconds: (Date.now() - started) / 1000,
    };
    report.targets = evaluate(report);
    const out = fileURLToPath(new URL('../../test/bench/results/latest.json', import.meta.url));
    mkdirSync(dirname(out), { recursive: true });
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
