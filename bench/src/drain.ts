// One drain run: feedsync (`run`, or `poll` + N × `work` on BullMQ) as child processes against a
// sandbox holding a backlog, timed from spawn until the jsonl sink holds a line for every key (mode
// `postgres`: `run` with a postgres sink instead of the jsonl one, until the mirror holds the newest
// change of every subject). A bullmq drain gets a fresh private redis-server of its own, so every
// run starts from the same empty Redis and Redis's CPU over the drain is the drain's alone.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { SandboxEvent, ServiceName } from '../../dist/sandbox/types.js';
import { serviceCounts, type SandboxControl, type ServiceCounts } from './control.js';
import { JsonlTail } from './jsonl-tail.js';
import { PgMirrorProgress } from './postgres.js';
import { cpuUs } from './proc-stats.js';
import { spawnChild, type Child, type SandboxInfo } from './procs.js';
import { startBenchRedis, type BenchRedis } from './redis.js';

export type DrainMode = 'local' | 'bullmq' | 'postgres';

export interface DrainOptions {
  mode: DrainMode;
  services: ServiceName[];
  info: SandboxInfo;
  control: SandboxControl;
  /** Every event of each service that must reach the sink. */
  events: Record<string, SandboxEvent[]>;
  dir: string;
  /** Mode bullmq: how many `work` processes beside the one `poll` (default 2; 0: poll alone). */
  works?: number;
  /** Mode bullmq: the Redis and the key prefix (runDrain starts a fresh Redis of its own). */
  redisUrl?: string;
  redisPrefix?: string;
  /** Mode postgres: the server, and the sink's schema (a new one per run). */
  postgresUrl?: string;
  postgresSchema?: string;
  timeoutMs: number;
  pollIntervalMs?: number;
  /** Extra node flags for the feedsync processes (e.g. --cpu-prof). */
  nodeArgs?: string[];
  /** Extra sinks (e.g. the latency sink) beside the jsonl one. */
  extraSinks?: Record<string, unknown>[];
}

export interface ServiceDrain extends ServiceCounts {
  service: ServiceName;
  events: number;
}

/** User + system CPU of one feedsync process (null when /proc could not be read). */
export interface ProcessCpu {
  role: string;
  /** Sampled after the drain completed, just before the process was stopped. */
  us: number | null;
  /** Sampled when the first line showed up in the jsonl sink (within one 50 ms poll of the tail). */
  usAtFirstLine: number | null;
}

export interface DrainResult {
  mode: DrainMode;
  seconds: number;
  complete: boolean;
  missing: number;
  lines: number;
  perService: ServiceDrain[];
  /** Peak RSS (bytes) per feedsync process, by role. */
  peakRss: { role: string; bytes: number }[];
  cpu: ProcessCpu[];
  /** Mode bullmq: the number of `work` processes. */
  works?: number;
  /** CPU µs of all feedsync processes of the drain (poll + every work, or run); null if unread. */
  cpuTotalUs: number | null;
  /** cpuTotalUs / events: issue 12's "CPU per event". */
  cpuUsPerEvent: number | null;
  /** Mode bullmq: the redis-server's CPU µs from the spawn of feedsync to the end of the drain (its reaped AOF-rewrite children included). */
  redisCpuUs?: number | null;
  /** Mode bullmq: (cpuTotalUs + redisCpuUs) / events, issue 29's CPU per event of the scaled mode. */
  cpuUsPerEventWithRedis?: number | null;
  /** The same from the first line in the sink on (start-up left out), / all events as in cpu.ts. */
  cpuUsPerEventAfterFirstLine: number | null;
  /** Spawn → the first change in the sink (start-up: boot, Redis, leases); null if none came. */
  firstLineSeconds: number | null;
  /** Every run when the drain was repeated (the figures above are the median run's). */
  runs?: {
    seconds: number;
    cpuUsPerEvent: number | null;
    cpuUsPerEventWithRedis?: number | null;
    complete: boolean;
  }[];
  /** Node flags the feedsync processes ran with. */
  nodeArgs?: string[];
  /** Last output of each process (warnings and errors), for diagnosis; not part of the results. */
  output: Record<string, string>;
}

export function writeConfig(opts: DrainOptions, jsonlPath: string): string {
  const config = {
    shutdown_timeout_ms: 10_000,
    store: { path: join(opts.dir, 'feedsync.db') },
    queue:
      opts.mode === 'bullmq'
        ? { driver: 'bullmq', redis_url: opts.redisUrl, prefix: opts.redisPrefix ?? 'bench' }
        : { driver: 'local' },
    sources: opts.services.map((service) => ({
      name: service,
      service,
      base_url: service === 'scheduling' ? opts.info.scheduling_base_url : opts.info.workflow_base_url,
      username: opts.info.username,
      password: opts.info.password,
      format: 'json',
      start_from: 'earliest',
      poll_interval_ms: opts.pollIntervalMs ?? 1000,
      // Loopback, like the raw limit: the figures measure the pipeline, not zlib.
      compression: false,
    })),
    sinks: [
      opts.mode === 'postgres'
        ? { name: 'pg', type: 'postgres', url: opts.postgresUrl, schema: opts.postgresSchema }
        : { name: 'file', type: 'jsonl', path: jsonlPath },
      ...(opts.extraSinks ?? []),
    ],
    http: { host: '127.0.0.1', port: 0 },
    log: { level: 'warn' },
  };
  const path = join(opts.dir, 'feedsync.yaml');
  writeFileSync(path, stringify(config));
  return path;
}

export function startFeedsync(opts: DrainOptions, configPath: string): { role: string; child: Child }[] {
  const spawnRole = (cmd: string) =>
    spawnChild([cmd, '--config', configPath], { nodeArgs: opts.nodeArgs ?? [], cwd: opts.dir });
  if (opts.mode !== 'bullmq') return [{ role: 'run', child: spawnRole('run') }];
  const works = Array.from({ length: opts.works ?? 2 }, (_, i) => ({
    role: `work-${i + 1}`,
    child: spawnRole('work'),
  }));
  return [{ role: 'poll', child: spawnRole('poll') }, ...works];
}

interface Progress {
  poll(): Promise<number>;
  lines: number;
  missingCount: number;
  close(): Promise<void>;
}

function syncProgress(tail: JsonlTail): Progress {
  return {
    poll: async () => tail.poll(),
    get lines() {
      return tail.lines;
    },
    get missingCount() {
      return tail.missingCount;
    },
    close: async () => tail.close(),
  };
}

/** A sum that is unknown when any part is. */
function sumOrNull(xs: (number | null)[]): number | null {
  return xs.some((x) => x === null) ? null : xs.reduce<number>((a, x) => a + x!, 0);
}

/** The median run by CPU per event (Redis included for bullmq): one run on a shared machine can be 15 % off. */
export function medianByCpu<T extends Pick<DrainResult, 'cpuUsPerEvent' | 'cpuUsPerEventWithRedis'>>(
  runs: T[],
): T {
  const cpu = (r: T): number => r.cpuUsPerEventWithRedis ?? r.cpuUsPerEvent ?? Infinity;
  const byCpu = [...runs].sort((a, b) => cpu(a) - cpu(b));
  return byCpu[Math.floor((byCpu.length - 1) / 2)]!;
}

/**
 * `repeats` rounds of one run of each of `plans`; the runs of each plan, in plan order. Rounds, not
 * one plan's runs in a row: on a shared machine the load drifts over minutes, and a ratio of two
 * plans is only fair if both met the same drift.
 */
export async function inRounds<P, R>(
  plans: P[],
  repeats: number,
  once: (plan: P, round: number) => Promise<R>,
): Promise<R[][]> {
  const runs = plans.map((): R[] => []);
  for (let round = 0; round < repeats; round++)
    for (const [i, plan] of plans.entries()) runs[i]!.push(await once(plan, round));
  return runs;
}

export async function runDrain(opts: DrainOptions): Promise<DrainResult> {
  if (opts.mode !== 'bullmq') return drainWith(opts);
  const redis = await startBenchRedis();
  try {
    return await drainWith({ ...opts, redisUrl: redis.url }, redis);
  } finally {
    await redis.stop();
  }
}

async function drainWith(opts: DrainOptions, redis?: BenchRedis): Promise<DrainResult> {
  mkdirSync(opts.dir, { recursive: true });
  const jsonlPath = join(opts.dir, 'changes.jsonl');
  const configPath = writeConfig(opts, jsonlPath);
  const keys = opts.services.flatMap((s) => (opts.events[s] ?? []).map((e) => `${s}:${e.id}`));
  const tail =
    opts.mode === 'postgres'
      ? new PgMirrorProgress(
          opts.postgresUrl!,
          opts.postgresSchema!,
          opts.services.flatMap((s) => opts.events[s] ?? []),
        )
      : syncProgress(new JsonlTail(jsonlPath, keys));
  await opts.control.resetStats();
  const redisAtStart = redis ? cpuUs(redis.pid, { reapedChildren: true }) : null;
  const started = performance.now();
  const procs = startFeedsync(opts, configPath);
  let seconds = 0;
  let atFirstLine: (number | null)[] | undefined;
  let firstLineSeconds: number | null = null;
  let atEnd: (number | null)[] = [];
  let redisAtEnd: number | null = null;
  try {
    const deadline = Date.now() + opts.timeoutMs;
    // The mirror is polled with a query (it competes for the CPU): less often than the file.
    const interval = opts.mode === 'postgres' ? 100 : 50;
    while ((await tail.poll()) > 0 && Date.now() < deadline) {
      // CPU after the first line leaves start-up out, as bench/cpu.ts does.
      if (atFirstLine === undefined && tail.lines > 0) {
        atFirstLine = procs.map((p) => cpuUs(p.child.pid));
        firstLineSeconds = (performance.now() - started) / 1000;
      }
      for (const p of procs) {
        if (p.child.proc.exitCode !== null)
          throw new Error(`feedsync ${p.role} exited with ${p.child.proc.exitCode}: ${p.child.output()}`);
      }
      await new Promise((r) => setTimeout(r, interval));
    }
    seconds = (performance.now() - started) / 1000;
  } finally {
    // CPU must be read while the processes are alive: /proc/<pid>/stat is gone after they exit.
    atEnd = procs.map((p) => cpuUs(p.child.pid));
    redisAtEnd = redis ? cpuUs(redis.pid, { reapedChildren: true }) : null;
    // RSS is sampled before SIGTERM inside stop(); the processes stop together.
    await Promise.all(procs.map((p) => p.child.stop()));
    if (tail instanceof PgMirrorProgress) await tail.verify().catch(() => undefined);
    await tail.close();
  }
  const stats = await opts.control.stats();
  const cpu = procs.map((p, i) => ({
    role: p.role,
    us: atEnd[i] ?? null,
    usAtFirstLine: atFirstLine?.[i] ?? null,
  }));
  const events = keys.length;
  const cpuTotalUs = sumOrNull(cpu.map((c) => c.us));
  const cpuAtFirstLine = sumOrNull(cpu.map((c) => c.usAtFirstLine));
  const redisCpuUs = redisAtStart === null || redisAtEnd === null ? null : redisAtEnd - redisAtStart;
  const withRedis = cpuTotalUs === null || redisCpuUs === null ? null : (cpuTotalUs + redisCpuUs) / events;
  return {
    mode: opts.mode,
    seconds,
    complete: tail.missingCount === 0,
    missing: tail.missingCount,
    lines: tail.lines,
    perService: opts.services.map((service) => ({
      service,
      events: opts.events[service]?.length ?? 0,
      ...serviceCounts(stats, service),
    })),
    peakRss: procs.map((p) => ({ role: p.role, bytes: p.child.peakRss() })),
    cpu,
    cpuTotalUs,
    cpuUsPerEvent: cpuTotalUs === null ? null : cpuTotalUs / events,
    ...(redis ? { works: opts.works ?? 2, redisCpuUs, cpuUsPerEventWithRedis: withRedis } : {}),
    cpuUsPerEventAfterFirstLine:
      cpuTotalUs === null || cpuAtFirstLine === null ? null : (cpuTotalUs - cpuAtFirstLine) / events,
    firstLineSeconds,
    output: Object.fromEntries(procs.map((p) => [p.role, p.child.output()])),
  };
}
