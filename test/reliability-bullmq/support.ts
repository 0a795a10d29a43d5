// Shared pieces of the BullMQ process-level suites: a config per test (fresh queue prefix), a
// seeded random source that failure messages name, and the oracles (keys delivered, mirror state).
import { Rng } from '../../src/sandbox/prng.js';
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import { randomUUID } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { rawConfig, readJsonl, type SourceOverrides } from '../support/harness.js';
import { spawnCli, type CliProcess, type LogEntry } from '../support/process.js';
import type { Change } from '../../src/core/change.js';
import { backlogKey, KeySpace } from '../../src/queue/bullmq/names.js';
import type { Sandbox } from '../../src/sandbox/index.js';

/** Replay a failing run with FEEDSYNC_RELIABILITY_SEED=<seed printed in the failure>. */
export function testSeed(): number {
  const fromEnv = process.env.FEEDSYNC_RELIABILITY_SEED;
  if (fromEnv !== undefined && /^\d+$/.test(fromEnv)) return Number(fromEnv);
  return Math.floor(Math.random() * 2 ** 31);
}

export function seedNote(seed: number): string {
  return `(seed ${seed}; replay with FEEDSYNC_RELIABILITY_SEED=${seed})`;
}

/** mulberry32: small, fast and good enough to pick kill moments and latencies reproducibly. */
export function seededRandom(seed: number): () => number {
  const rng = new Rng(seed);
  return () => rng.next();
}

export interface BullmqConfigOptions {
  sinks: Record<string, unknown>[];
  services?: ('scheduling' | 'workflow')[];
  source?: SourceOverrides;
  queue?: Record<string, unknown>;
  shutdownTimeoutMs?: number;
}

/** A raw config for the sandbox on the bullmq driver, with a queue prefix no other test uses. */
export function bullmqConfig(
  sandbox: Sandbox,
  dir: string,
  redisUrl: string,
  opts: BullmqConfigOptions,
): Record<string, unknown> {
  const base = rawConfig(sandbox, dir, {
    services: opts.services,
    source: opts.source,
    sinks: opts.sinks,
    queue: {
      driver: 'bullmq',
      redis_url: redisUrl,
      prefix: `rb-${randomUUID().slice(0, 8)}`,
      ...opts.queue,
    },
  });
  return {
    ...base,
    shutdown_timeout_ms: opts.shutdownTimeoutMs ?? 5000,
    // The suites wait for log lines (started, lock held/waiting), so info is needed.
    log: { level: 'info' },
  };
}

/**
 * Starts `feedsync poll|work` on `configPath`, WORKER_ID=`id` (for per-worker sink files); with
 * RB_ECHO set, their output is echoed prefixed with the id.
 */
export function cliStarter(
  configPath: string,
  cli?: string,
): (mode: 'poll' | 'work', id: string) => CliProcess {
  return (mode, id) =>
    spawnCli([mode], {
      config: configPath,
      env: { WORKER_ID: id },
      echo: process.env.RB_ECHO ? `[${id}]` : undefined,
      ...(cli && { cli }),
    });
}

export const isStarted = (e: LogEntry): boolean => e.msg === 'feedsync started';

export async function waitStarted(...procs: CliProcess[]): Promise<void> {
  await Promise.all(procs.map((p) => p.waitForLog(isStarted, 20_000, `"feedsync started" of ${p.pid}`)));
}

/** Every key the sandbox produced, for both services, as `<service>:<id>` (source name = service). */
export function sandboxKeys(
  sandbox: Sandbox,
  services: readonly ('scheduling' | 'workflow')[] = ['scheduling', 'workflow'],
): string[] {
  return services.flatMap((s) => sandbox.events(s).map((e) => `${s}:${e.id}`));
}

/** All changes in the jsonl files of `dir` whose names start with `prefix`. */
export function readJsonlFiles(dir: string, prefix: string): Change[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.startsWith(prefix) && f.endsWith('.jsonl'))
    .flatMap((f) => readJsonl(join(dir, f)));
}

export function missingKeys(expected: readonly string[], changes: readonly Change[]): string[] {
  const seen = new Set(changes.map((c) => c.key));
  return expected.filter((k) => !seen.has(k));
}

/** The prefix a bullmqConfig() result uses (each test gets its own). */
export function queuePrefix(raw: Record<string, unknown>): string {
  return (raw.queue as { prefix: string }).prefix;
}

/**
 * The cursors `feedsync poll` keeps in Redis (scaled mode has no store file), sampled every
 * `everyMs` in the background so synchronous progress lines can show them.
 */
export function watchRedisCursors(
  redisUrl: string,
  prefix: string,
  everyMs = 500,
): {
  get(source: string): number | undefined;
  read(source: string): Promise<number | undefined>;
  stop(): void;
} {
  const client = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  client.on('error', () => undefined);
  const last = new Map<string, number>();
  const read = async (source: string): Promise<number | undefined> => {
    const value = await client.hget(`{${prefix}}:source:${source}`, 'cursor');
    if (value === null) return undefined;
    last.set(source, Number(value));
    return Number(value);
  };
  const timer = setInterval(() => {
    for (const source of ['scheduling', 'workflow']) read(source).catch(() => undefined);
  }, everyMs);
  return {
    get: (source) => last.get(source),
    read,
    stop: () => {
      clearInterval(timer);
      client.disconnect();
    },
  };
}

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

const ISO_WITH_ZONE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}(:?\d{2})?)$/;

/** The contract's normalization of a JSON resource: zoned datetimes become UTC with ms and Z. */
function normalized(value: Json): Json {
  if (typeof value === 'string') return ISO_WITH_ZONE.test(value) ? new Date(value).toISOString() : value;
  if (Array.isArray(value)) return value.map(normalized);
  if (value !== null && typeof value === 'object')
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, normalized(v)]));
  return value;
}

/**
 * Differences between the mirror's live rows and the sandbox's live subjects: every live subject
 * is a live row and vice versa; every field a mirror copy has equals the live resource's (the
 * scheduling feed embeds subjects with fewer fields than a GET), and workflow subjects, fetched by
 * GET, are equal as a whole. Returns at most `limit` problems.
 */
export function mirrorProblems(mirrorPath: string, sandbox: Sandbox, limit = 10): string[] {
  const db = new Database(mirrorPath, { readonly: true, fileMustExist: true });
  const rows = db.prepare('SELECT subject_url, service, subject FROM live_subjects').all() as {
    subject_url: string;
    service: string;
    subject: string | null;
  }[];
  db.close();
  const problems: string[] = [];
  const mirror = new Map(rows.map((r) => [r.subject_url, r]));
  for (const service of ['scheduling', 'workflow'] as const) {
    for (const [url, resource] of Object.entries(sandbox.liveState(service))) {
      const row = mirror.get(url);
      mirror.delete(url);
      if (!row) {
        problems.push(`live ${service} subject ${url} is not a live row of the mirror`);
        continue;
      }
      const want = normalized(resource as Json) as Record<string, Json>;
      const got = JSON.parse(row.subject ?? 'null') as Record<string, Json> | null;
      if (got === null) {
        problems.push(`mirror row ${url} has no subject`);
        continue;
      }
      if (service === 'workflow') {
        if (JSON.stringify(sorted(got)) !== JSON.stringify(sorted(want)))
          problems.push(`workflow ${url}: mirror ${JSON.stringify(got)} != live ${JSON.stringify(want)}`);
        continue;
      }
      for (const [field, value] of Object.entries(got)) {
        if (JSON.stringify(sorted(value)) !== JSON.stringify(sorted(want[field] ?? null)))
          problems.push(
            `scheduling ${url}.${field}: mirror ${JSON.stringify(value)} != live ${JSON.stringify(want[field])}`,
          );
      }
    }
  }
  for (const url of mirror.keys()) problems.push(`mirror has a live row for ${url}, the sandbox does not`);
  return problems.slice(0, limit);
}

function sorted(value: Json): Json {
  if (Array.isArray(value)) return value.map(sorted);
  if (value !== null && typeof value === 'object')
    return Object.fromEntries(
      Object.keys(value)
        .sort()
        .map((k) => [k, sorted(value[k]!)]),
    );
  return value;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** SIGTERM each process and check the contract: exit 0 within shutdown_timeout_ms. */
export async function stopGracefully(
  procs: CliProcess[],
  shutdownTimeoutMs: number,
): Promise<{ pid: number; code: number | null; signal: string | null; ms: number }[]> {
  return Promise.all(
    procs.map(async (p) => {
      const t0 = Date.now();
      p.signal('SIGTERM');
      const exit = await p.waitForExit(shutdownTimeoutMs + 5_000);
      return { pid: p.pid, code: exit.code, signal: exit.signal, ms: Date.now() - t0 };
    }),
  );
}

/** Samples `describe()` every `everyMs` while a test runs; the lines go into failure messages. */
export function progressTrace(describe: () => string, everyMs = 2_000): { stop(): void; text(): string } {
  const t0 = Date.now();
  const lines: string[] = [];
  const sample = (): void => {
    lines.push(`+${Date.now() - t0} ms ${describe()}`);
    if (lines.length > 120) lines.splice(0, lines.length - 120);
  };
  const timer = setInterval(sample, everyMs);
  return {
    stop: () => clearInterval(timer),
    text: () => {
      sample();
      return lines.join('\n');
    },
  };
}

/**
 * Polls `check` every `everyMs` until it holds; bounded by `timeoutMs`. Slower than the harness's
 * waitFor on purpose: these checks read whole output files, and the test process shares two cores
 * with the processes under test.
 */
export async function eventually(
  check: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: string,
  everyMs = 250,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() >= deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/**
 * Waits until a `feedsync poll` process holds the lock of every source. A restarted poller logs it
 * only after the dead one's lock expired (TTL): killing it before then would only stack TTL waits.
 */
export async function waitSourceLocks(
  poller: CliProcess,
  timeoutMs: number,
  sources: readonly string[] = ['scheduling', 'workflow'],
): Promise<void> {
  await Promise.all(
    sources.map((s) =>
      poller.waitForLog(
        (e) => e.msg === `acquired the lease of source ${s}`,
        timeoutMs,
        `poller ${poller.pid} to acquire the lock of source ${s}`,
      ),
    ),
  );
}

/** The seeded Fisher–Yates shuffle of `items` (a new array). */
export function seededShuffle<T>(items: readonly T[], random: () => number): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/** A sink's backlog counters on a Redis Cluster, one per source's slot (its queues live there). */
export async function clusterBacklogs(
  client: Redis,
  prefix: string,
  sink: string,
  sources: readonly string[],
): Promise<number[]> {
  const keys = KeySpace.cluster(prefix, sources, 1);
  const out: number[] = [];
  for (const tag of keys.queueTags) out.push(Number((await client.hget(backlogKey(tag), sink)) ?? 0));
  return out;
}

/**
 * Waits until a sink's backlog counters on a Redis Cluster are 0 once everything was delivered:
 * each queued change counted in once and out once, or a drift reset by the pollers' check of
 * drained queues (every 10 s).
 */
export async function expectClusterBacklogDrained(
  client: Redis,
  prefix: string,
  sink: string,
  sources: readonly string[],
  what: string,
): Promise<void> {
  const counters = () => clusterBacklogs(client, prefix, sink, sources);
  await eventually(
    async () => (await counters()).every((n) => n === 0),
    30_000,
    `the backlog of ${sink} back at 0 ${what}`,
  ).catch(async (err: Error) => {
    throw new Error(`${err.message}: per source ${(await counters()).join(', ')}`);
  });
}

/**
 * Changes of one subject handed over out of id order, in `changes` as delivered (one worker's
 * file): at most `limit` of them. Id order is feed order for a feed listed by id (scheduling).
 */
export function subjectOrderProblems(changes: readonly Change[], limit = 10): string[] {
  const last = new Map<string, number>();
  const problems: string[] = [];
  for (const c of changes) {
    const subject = c.subject_url ?? c.key;
    const before = last.get(subject);
    if (before !== undefined && c.event_id < before)
      problems.push(`${subject}: event ${c.event_id} delivered after ${before}`);
    last.set(subject, Math.max(before ?? 0, c.event_id));
  }
  return problems.slice(0, limit);
}
