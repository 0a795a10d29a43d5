// One fault run, end to end: a sandbox (seeded backlog, live events, seeded workflow disorder),
// real feedsync processes — `run` ×2 on one store (holder + standby, local driver) or `poll` ×2 +
// `work` ×2 over a real redis-server (bullmq, each process behind its own TCP proxy) — four sinks
// (two recorder sinks, the second offering deliverBatch; a jsonl sink with a filter; the sqlite
// mirror, whose end state is checked), the seeded fault schedule, then healing, a drain (every
// change in every sink, the mirror at every subject's last event), a graceful stop, and the checker
// over the whole history.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { stringify } from 'yaml';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { deriveSeed, Rng } from '../../src/sandbox/prng.js';
import {
  check,
  describeResult,
  isSkipped,
  mirrorStale,
  passes,
  replayOwed,
  skippedByResets,
  type CheckResult,
} from './checker.js';
import { nemesisOf } from './nemesis/index.js';
import { startFaultProxy, type FaultProxy } from './proxy.js';
import { DeliveryLog, now, sampleRedis, sampleStore, scrapeLeaseLoss, type Sampler } from './recorder.js';
import { startRedisProc, type RedisProc } from './redis-proc.js';
import { startPostgres, type PostgresServer } from '../support/postgres.js';
import { formatSchedule, makeSchedule, type ScheduleOptions } from './schedule.js';
import { cliSpawner, Supervisor, writeJsonFile } from './supervisor.js';
import type {
  CursorCommand,
  ExpectedEvent,
  FaultKind,
  FaultRecord,
  History,
  MirrorRow,
  ReplayCommand,
  Scenario,
  SinkSpec,
} from './types.js';
import type { PlanContext, SinkBehaviour, Step, Timing, World } from './world.js';
import { BULLMQ_SLOTS, LOCAL_SLOTS } from './nemesis/targets.js';

const RECORDER = resolve(import.meta.dirname, 'fixtures/recorder-sink.mjs');
const SOURCES = ['scheduling', 'workflow'] as const;

export interface RunOptions {
  seed: number;
  scenario: Scenario;
  /** Faults in the schedule. */
  faults: number;
  /** Longest single fault (ms). */
  maxFaultMs: number;
  /** Sandbox backlog per service. */
  backlog: number;
  /** Live events per second per service while faults run. */
  rate: number;
  /** How long the drain after healing may take before what is missing counts as lost. */
  drainMs: number;
  require?: ScheduleOptions['require'];
  kinds?: FaultKind[];
  gapMs?: [number, number];
  /** Progress lines (the schedule, each fault, exits). */
  log?: (line: string) => void;
}

export interface RunResult {
  seed: number;
  scenario: Scenario;
  schedule: Step[];
  history: History;
  result: CheckResult;
  /** Faults actually injected, by kind (a cursor fault also counts its kills/freezes). */
  injected: Partial<Record<FaultKind, number>>;
  /** Processes that exited by themselves, by reason (paths and numbers blanked). */
  exits: Record<string, number>;
  durationMs: number;
  drained: boolean;
  notes: string[];
  dir: string;
  report(): string;
}

const LEASE_TTL_MS = 3_000;
export const DEFAULT_TIMING: Timing = {
  leaseTtlMs: LEASE_TTL_MS,
  // The store lease follows queue.lease_ttl_ms (src/queue/local/index.ts).
  localLeaseMs: Number(process.env.FAULT_LOCAL_LEASE_MS ?? LEASE_TTL_MS),
  // A worker's job lock lasts queue.lease_ttl_ms and stalled jobs are looked for every half of it
  // (src/queue/bullmq/delivery.ts).
  workerLockMs: Number(process.env.FAULT_WORKER_LOCK_MS ?? LEASE_TTL_MS * 1.5),
};

/** `FAULT_SEED=n` replays a run; otherwise a fresh random seed. */
export function faultSeed(): number {
  const s = process.env.FAULT_SEED;
  if (s !== undefined && /^\d+$/.test(s)) return Number(s);
  return Math.floor(Math.random() * 2 ** 31);
}

export function canMountTmpfs(): boolean {
  if (process.env.FAULT_NO_MOUNT === '1') return false;
  const dir = mkdtempSync(join(tmpdir(), 'feedsync-faults-mnt-'));
  const ok =
    spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', dir], { stdio: 'ignore' }).status === 0;
  if (ok) spawnSync('umount', ['-l', dir], { stdio: 'ignore' });
  rmSync(dir, { recursive: true, force: true });
  return ok;
}

let mountCheck: boolean | undefined;

/** What a run still holds (processes, Redis, mounts), for afterAll when a test timed out mid-run. */
const pending = new Set<() => Promise<void>>();

export async function cleanupFaultRuns(): Promise<void> {
  for (const fn of [...pending]) await fn().catch(() => undefined);
  pending.clear();
}

export async function runFaultScenario(opts: RunOptions): Promise<RunResult> {
  const started = Date.now();
  const t0 = now();
  const notes: string[] = [];
  const log = (line: string) => {
    const stamped = `+${((now() - t0) / 1000).toFixed(1)}s ${line}`;
    notes.push(stamped);
    opts.log?.(`[${opts.scenario} seed ${opts.seed}] ${stamped}`);
  };
  const { seed, scenario } = opts;
  const rng = new Rng(deriveSeed(seed, 200));
  const disorder = rng.int(0, 5);
  mountCheck ??= canMountTmpfs();
  const canMount = scenario === 'local' && mountCheck;
  const timing = DEFAULT_TIMING;
  const ctx: PlanContext = { scenario, timing, maxFaultMs: opts.maxFaultMs, canMount };
  const schedule = makeSchedule(seed, ctx, {
    faults: opts.faults,
    require: opts.require,
    kinds: opts.kinds,
    gapMs: opts.gapMs,
  });
  log(
    `schedule (replay with FAULT_SEED=${seed}), workflow disorder ${disorder}:\n${formatSchedule(schedule)}`,
  );

  const dir = mkdtempSync(join(tmpdir(), `feedsync-faults-${scenario}-`));
  const histDir = join(dir, 'history');
  mkdirSync(histDir);
  const controlPath = join(dir, 'control.json');
  const control: { sinks: Record<string, SinkBehaviour> } = { sinks: {} };
  writeJsonFile(controlPath, control);
  const jsonlPath = join(dir, 'changes.jsonl');
  const mirrorPath = join(dir, 'mirror.db');
  let mountDir: string | undefined;
  let storePath = join(dir, 'feedsync.db');
  if (canMount) {
    mountDir = join(dir, 'store');
    mkdirSync(mountDir);
    if (
      spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=256m', 'tmpfs', mountDir], { stdio: 'ignore' })
        .status === 0
    )
      storePath = join(mountDir, 'feedsync.db');
    else mountDir = undefined;
  }

  const sinks: SinkSpec[] = [
    { name: 'rec-a', recorded: true, filter: {} },
    { name: 'rec-b', recorded: true, filter: {} },
    { name: 'file', recorded: false, filter: { sources: ['scheduling'] } },
  ];
  const faults: FaultRecord[] = [];
  const cursorCommands: CursorCommand[] = [];
  const replays: ReplayCommand[] = [];
  const heals: (() => void | Promise<void>)[] = [];
  let sandbox: Sandbox | undefined;
  let redis: RedisProc | undefined;
  let postgres: PostgresServer | undefined;
  let pgReader: pg.Client | undefined;
  const proxies = new Map<string, FaultProxy>();
  let sup: Supervisor | undefined;
  let sampler: Sampler | undefined;
  let scraper: ReturnType<typeof scrapeLeaseLoss> | undefined;
  const deliveries = new DeliveryLog(histDir);
  let keep = false;
  let cleaned = false;
  const cleanup = async () => {
    if (cleaned) return;
    cleaned = true;
    pending.delete(cleanup);
    scraper?.stop();
    await sampler?.stop().catch(() => undefined);
    await sup?.killEverything().catch(() => undefined);
    await sandbox?.close().catch(() => undefined);
    for (const p of proxies.values()) await p.close().catch(() => undefined);
    await redis?.stop().catch(() => undefined);
    await pgReader?.end().catch(() => undefined);
    postgres?.stop();
    if (mountDir) spawnSync('umount', ['-l', mountDir], { stdio: 'ignore' });
    if (!keep) rmSync(dir, { recursive: true, force: true });
  };
  pending.add(cleanup);

  try {
    sandbox = await startSandbox({ seed, backlog: opts.backlog, workflowDisorder: disorder });
    postgres = await startPostgres();
    pgReader = new pg.Client({ connectionString: postgres.url });
    await pgReader.connect();
    const theReader = pgReader;
    /** Both mirrors' rows, by sink name. */
    const readMirrors = async () => ({
      mirror: readMirror(mirrorPath),
      'mirror-pg': await readPgMirror(theReader),
    });
    const prefix = `faults-${seed}`;
    const baseConfig = (redisUrl?: string): Record<string, unknown> => ({
      shutdown_timeout_ms: 5_000,
      store: { path: storePath },
      queue: {
        ...(scenario === 'bullmq'
          ? { driver: 'bullmq', redis_url: redisUrl, prefix, shards: 4 }
          : { driver: 'local' }),
        concurrency: 4,
        attempts: 100_000,
        backoff_ms: 50,
        max_backoff_ms: 1_000,
        lease_ttl_ms: timing.leaseTtlMs,
        // Small enough that sinks are parked and catch up from the feed under the faults (per-sink
        // positions), not only while a sink fault runs. FAULT_MAX_BACKLOG=1000000 turns it off.
        max_backlog: Number(process.env.FAULT_MAX_BACKLOG ?? 1000),
      },
      sources: SOURCES.map((service) => ({
        name: service,
        service,
        base_url: service === 'scheduling' ? sandbox!.schedulingBaseUrl : sandbox!.workflowBaseUrl,
        username: sandbox!.username,
        password: sandbox!.password,
        format: service === 'scheduling' ? 'json' : 'xml',
        start_from: 'earliest',
        poll_interval_ms: 100,
        timeout_ms: 2_000,
      })),
      sinks: [
        {
          name: 'rec-a',
          type: 'module',
          module: RECORDER,
          options: { dir: histDir, control: controlPath, latency_ms: 3 },
        },
        {
          name: 'rec-b',
          type: 'module',
          module: RECORDER,
          options: { dir: histDir, control: controlPath, latency_ms: 3, batch: true },
        },
        { name: 'file', type: 'jsonl', path: jsonlPath, filter: { sources: ['scheduling'] } },
        // The product's own fenced sinks, shared by every process: their end state is checked
        // (mirror-stale).
        { name: 'mirror', type: 'sqlite', path: mirrorPath },
        { name: 'mirror-pg', type: 'postgres', url: postgres!.url, schema: 'mirror' },
      ],
      http: { host: '127.0.0.1', port: 0 },
      log: { level: 'info' },
    });
    const writeYaml = (name: string, raw: Record<string, unknown>) => {
      const path = join(dir, name);
      writeFileSync(path, stringify(raw));
      return path;
    };

    sup = await Supervisor.create(now, log);
    let opsConfig: string;
    if (scenario === 'bullmq') {
      redis = await startRedisProc();
      opsConfig = writeYaml('ops.yaml', baseConfig(redis.url));
      for (const slot of BULLMQ_SLOTS) {
        const proxy = await startFaultProxy(redis.port);
        proxies.set(slot, proxy);
        sup.add({
          name: slot,
          role: slot.startsWith('p') ? 'poll' : 'work',
          configPath: writeYaml(`${slot}.yaml`, baseConfig(proxy.url)),
        });
      }
      sampler = sampleRedis(redis.url, prefix, [...SOURCES]);
    } else {
      opsConfig = writeYaml('ops.yaml', baseConfig());
      for (const slot of LOCAL_SLOTS) sup.add({ name: slot, role: 'run', configPath: opsConfig });
      sampler = sampleStore(storePath);
    }
    const pollers = scenario === 'bullmq' ? ['p1', 'p2'] : [...LOCAL_SLOTS];
    const { spawnCli } = await cliSpawner();
    const theSup = sup;
    const theSampler = sampler;

    /** An operator command to its end (killed after 30 s): its exit code and output. */
    const runOps = async (args: string[]) => {
      const p = spawnCli(args, { config: opsConfig });
      let code: number | null = null;
      try {
        code = (await p.waitForExit(30_000)).code;
      } catch {
        p.signal('SIGKILL');
        await p.waitForExit(5_000).catch(() => undefined);
      }
      return { p, code, output: p.text() };
    };
    const world: World = {
      scenario,
      timing,
      now,
      sleep: (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms))),
      sandbox,
      sup,
      sampler,
      redis,
      proxies,
      store: scenario === 'local' ? { path: storePath, mountDir } : undefined,
      pollers,
      setSink(name, b) {
        if (b) control.sinks[name] = b;
        else delete control.sinks[name];
        writeJsonFile(controlPath, control);
      },
      async cursorCommand(args) {
        const start = now();
        const { p, code, output } = await runOps(args);
        const m = /^(\S+): cursor (\S+) → (\d+)\s*$/m.exec(p.stdout().join('\n'));
        const ok = code === 0 && !!m;
        const cmd: CursorCommand = {
          source: args[2]!,
          args,
          start,
          end: now(),
          ok,
          ...(m ? { before: m[2] === '(none)' ? null : Number(m[2]), after: Number(m[3]) } : {}),
          output: output.slice(-600),
        };
        cursorCommands.push(cmd);
        log(
          `\`feedsync ${args.join(' ')}\`: ${ok ? `ok (${m![2]} → ${m![3]})` : `refused/failed (exit ${code}): ${lastLine(output)}`}`,
        );
        return cmd;
      },
      async replayCommand(sink, source, from) {
        const args = ['replay', '--sink', sink, '--source', source, '--from', String(from)];
        const start = now();
        const { p, code, output } = await runOps(args);
        const m = /^(\S+) from (\S+): replaying after event (\d+) \(it was at (\(none\)|\d+)\)/m.exec(
          p.stdout().join('\n'),
        );
        const ok = code === 0 && !!m && m[1] === sink && m[2] === source && Number(m[3]) === from;
        const cmd: ReplayCommand = {
          sink,
          source,
          from,
          start,
          end: now(),
          ok,
          ...(m ? { before: m[4] === '(none)' ? null : Number(m[4]) } : {}),
          output: output.slice(-600),
        };
        replays.push(cmd);
        log(
          `\`feedsync ${args.join(' ')}\`: ${ok ? `ok (it was at ${m![4]})` : `refused/failed (exit ${code}): ${lastLine(output)}`}`,
        );
        return cmd;
      },
      record(f) {
        faults.push(f);
        log(
          `fault ${f.kind} ${f.target} pids [${f.pids.join(',')}] ${((f.end - f.start) / 1000).toFixed(1)}s ${JSON.stringify(f.detail)}`,
        );
      },
      expireLeaseOf(pid) {
        expireStoreLease(storePath, pid);
      },
      holderSlot(source) {
        const h = theSampler.holder(scenario === 'local' ? '*' : (source ?? 'scheduling'));
        const pid = h?.owner ? Number(h.owner.slice(h.owner.lastIndexOf(':') + 1)) : undefined;
        const slot = pid !== undefined ? theSup.slotOfPid(pid) : undefined;
        return slot && theSup.running(slot) ? slot : undefined;
      },
      log,
      onHeal: (fn) => heals.push(fn),
    };

    // Start: every process up before the first fault.
    // One after the other: processes opening the same sqlite mirror at once can refuse to start
    // ("database is locked"); the supervisor restarts one that exits anyway.
    for (const slot of sup.names()) await sup.startAndWait(slot, 30_000);
    scraper = scrapeLeaseLoss(sup);
    sandbox.setRate(opts.rate);
    log(`started ${sup.lives.map((l) => `${l.name}=${l.pid}`).join(' ')}; dir ${dir}`);

    // The fault phase: foreground faults one after another (each waits for the one before it),
    // background ones (sinks, feed) at their nominal times, overlapping them.
    const phaseStart = Date.now();
    const runStep = async (step: Step) => {
      try {
        await nemesisOf(step.kind).run(world, step);
      } catch (err) {
        log(`fault ${step.kind} → ${step.target} could not run: ${(err as Error).message}`);
      }
    };
    const background = schedule
      .filter((s) => nemesisOf(s.kind).background)
      .map(async (step) => {
        await world.sleep(phaseStart + step.at - Date.now());
        await runStep(step);
      });
    let foregroundFree = phaseStart;
    for (const step of schedule.filter((s) => !nemesisOf(s.kind).background)) {
      await world.sleep(Math.max(phaseStart + step.at, foregroundFree) - Date.now());
      await runStep(step);
      foregroundFree = Date.now() + 300;
    }
    await Promise.all(background);
    // Background faults still running end here at the latest.
    const lastEnd = Math.max(0, ...faults.map((f) => f.end));
    await world.sleep(Math.min(10_000, lastEnd - now()));
    // Heal everything, stop the live events, and let the sinks drain.
    await world.sleep(1_000);
    for (const fn of heals) await fn();
    for (const p of proxies.values()) p.thaw();
    if (redis) {
      if (redis.frozen) redis.thaw();
      if (!redis.running) await redis.start();
    }
    sup.heal();
    sandbox.setRate(0);
    await world.sleep(300);
    log('healed; draining');

    const events = expectedEvents(sandbox);
    const drainDeadline = Date.now() + opts.drainMs;
    let drained = false;
    let missing = 0;
    while (Date.now() < drainDeadline) {
      deliveries.poll();
      missing =
        missingCount(events, sinks, deliveries, jsonlPath, cursorCommands) +
        mirrorBehind(events, await readMirrors(), cursorCommands) +
        replayOwedCount(events, sinks, deliveries, cursorCommands, replays);
      if (missing === 0) {
        drained = true;
        break;
      }
      await world.sleep(500);
    }
    log(drained ? 'drained' : `drain timed out with ${missing} (sink, change) pairs or mirror rows missing`);
    await scraper.scrape();
    scraper.stop();
    await sup.stopAll(8_000);
    await sampler.stop();
    deliveries.poll();

    const history: History = {
      seed,
      scenario,
      t0,
      tEnd: now(),
      events,
      sinks,
      deliveries: deliveries.deliveries,
      delivered: { file: [...readJsonlKeys(jsonlPath)] },
      processes: sup.lives,
      faults,
      cursorSamples: sampler.cursors,
      leaseSamples: sampler.leases,
      cursorCommands,
      replays,
      afterLeaseLoss: scraper.counts(),
      mirrors: await readMirrors(),
    };
    const result = check(history);
    const injected: Partial<Record<FaultKind, number>> = {};
    for (const f of faults) injected[f.kind] = (injected[f.kind] ?? 0) + 1;
    keep = (result.anomalies.length > 0 && process.env.FAULT_KEEP !== '0') || process.env.FAULT_KEEP === '1';
    if (keep) {
      for (const { slot, proc } of sup.procs)
        writeFileSync(join(dir, `${slot}-${proc.pid}.log`), proc.text());
      const all = SOURCES.flatMap((service) => sandbox!.events(service));
      writeFileSync(join(dir, 'sandbox-events.jsonl'), all.map((e) => JSON.stringify(e)).join('\n') + '\n');
      writeFileSync(join(dir, 'history.json'), JSON.stringify({ ...history, events: [], deliveries: [] }));
    }
    const exits: Record<string, number> = {};
    for (const x of sup.exits) {
      const reason = `exit ${x.code}: ${x.reason.replace(/\/tmp\/\S+/g, '<path>').replace(/\d+/g, 'N')}`;
      exits[reason] = (exits[reason] ?? 0) + 1;
    }
    const durationMs = Date.now() - started;
    const run: RunResult = {
      seed,
      scenario,
      schedule,
      history,
      result,
      injected,
      exits,
      durationMs,
      drained,
      notes,
      dir,
      report: () =>
        [
          `${scenario} seed ${seed} (replay: FAULT_SEED=${seed}) in ${(durationMs / 1000).toFixed(1)} s${keep ? `; files kept in ${dir}` : ''}`,
          `schedule:\n${formatSchedule(schedule)}`,
          `injected: ${
            Object.entries(injected)
              .map(([k, n]) => `${k} ${n}`)
              .join(', ') || 'none'
          }`,
          `processes: ${history.processes.map((l) => `${l.name}=${l.pid}${l.how ? `(${l.how}${l.code ? ` ${l.code}` : ''})` : ''}`).join(' ')}`,
          `processes that exited by themselves: ${
            Object.entries(exits)
              .map(([k, n]) => `${n}× ${k}`)
              .join('; ') || 'none'
          }`,
          `after-lease-loss counted: ${history.afterLeaseLoss.map((c) => `${c.pid}/${c.sink}=${c.count}`).join(' ') || 'none'}`,
          describeResult(result),
          `log:\n${notes.slice(-60).join('\n')}`,
        ].join('\n'),
    };
    return run;
  } finally {
    await cleanup();
  }
}

function lastLine(text: string): string {
  return (
    text
      .split('\n')
      .map((l) => l.replace(/^\[(stdout|stderr)\] /, ''))
      .filter((l) => l.trim())
      .at(-1) ?? ''
  ).slice(0, 300);
}

/** Local: a killed process's store lease expires now, as if its TTL had passed. */
function expireStoreLease(storePath: string, pid: number): void {
  if (!existsSync(storePath)) return;
  const db = new Database(storePath, { fileMustExist: true, timeout: 0 });
  try {
    for (let i = 0; i < 200; i++) {
      try {
        db.prepare('UPDATE store_lease SET heartbeat_at = 0 WHERE owner LIKE ?').run(`%:${pid}`);
        return;
      } catch (err) {
        const code = (err as { code?: string }).code;
        if (code !== 'SQLITE_BUSY') return; // no such table (an older build), …
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
      }
    }
  } finally {
    db.close();
  }
}

/** Every sandbox event as an expected change, with its position in the feed's listing order. */
export function expectedEvents(sandbox: Sandbox): ExpectedEvent[] {
  const out: ExpectedEvent[] = [];
  for (const service of SOURCES) {
    const evs = sandbox.events(service);
    const listed =
      service === 'scheduling'
        ? evs
        : [...evs].sort((a, b) => Date.parse(a.occurred_at) - Date.parse(b.occurred_at) || a.id - b.id);
    listed.forEach((e, pos) =>
      out.push({
        source: service,
        service,
        key: `${service}:${e.id}`,
        id: e.id,
        subject: e.subject_url,
        event_type: e.event_type,
        resource_type: e.resource_type,
        pos,
      }),
    );
  }
  return out;
}

function readJsonlKeys(path: string): Set<string> {
  const keys = new Set<string>();
  if (!existsSync(path)) return keys;
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    try {
      keys.add((JSON.parse(line) as { key: string }).key);
    } catch {
      // torn line
    }
  }
  return keys;
}

function missingCount(
  events: ExpectedEvent[],
  sinks: SinkSpec[],
  log: DeliveryLog,
  jsonlPath: string,
  commands: CursorCommand[],
): number {
  const jsonl = readJsonlKeys(jsonlPath);
  const skipped = skippedByResets(commands);
  let missing = 0;
  for (const sink of sinks) {
    const got = sink.recorded ? (log.delivered.get(sink.name) ?? new Set<string>()) : jsonl;
    for (const e of events)
      if (passes(sink.filter, e) && !isSkipped(skipped, e) && !got.has(e.key)) missing++;
  }
  return missing;
}

/** (sink, change) pairs an accepted `feedsync replay` put back and that were not delivered again yet. */
function replayOwedCount(
  events: ExpectedEvent[],
  sinks: SinkSpec[],
  log: DeliveryLog,
  commands: CursorCommand[],
  replays: ReplayCommand[],
): number {
  if (!replays.some((r) => r.ok)) return 0;
  const applied = new Map<string, { start: number; stop: number }[]>();
  for (const d of log.deliveries) {
    if (d.ok !== true || d.end === undefined) continue;
    const k = `${d.sink}\u0000${d.key}`;
    const list = applied.get(k) ?? [];
    list.push({ start: d.start, stop: d.end });
    applied.set(k, list);
  }
  return replayOwed(events, sinks, replays, skippedByResets(commands), applied).reduce(
    (n, o) => n + o.owed.length,
    0,
  );
}

/** The sqlite mirror's rows ({} before it exists). */
function readMirror(path: string): Record<string, MirrorRow> {
  if (!existsSync(path)) return {};
  try {
    const db = new Database(path, { readonly: true, fileMustExist: true, timeout: 200 });
    try {
      const rows = db.prepare('SELECT subject_url, last_event_id, deleted FROM subjects').all() as {
        subject_url: string;
        last_event_id: number;
        deleted: number;
      }[];
      return Object.fromEntries(
        rows.map((r) => [r.subject_url, { last: r.last_event_id, deleted: r.deleted === 1 }]),
      );
    } finally {
      db.close();
    }
  } catch {
    return {}; // not migrated yet, or busy
  }
}

/** The postgres mirror's rows ({} before feedsync created its table). */
async function readPgMirror(client: pg.Client): Promise<Record<string, MirrorRow>> {
  try {
    const { rows } = await client.query<{ subject_url: string; last_event_id: string; deleted: boolean }>(
      'SELECT subject_url, last_event_id, deleted FROM mirror.subjects',
    );
    return Object.fromEntries(
      rows.map((r) => [r.subject_url, { last: Number(r.last_event_id), deleted: r.deleted }]),
    );
  } catch {
    return {}; // not migrated yet
  }
}

/** Mirror rows, over every mirror, not yet what the feed says (skipped ranges aside). */
function mirrorBehind(
  events: ExpectedEvent[],
  mirrors: Record<string, Record<string, MirrorRow>>,
  commands: CursorCommand[],
): number {
  const skipped = skippedByResets(commands);
  return Object.values(mirrors).reduce((n, rows) => n + mirrorStale(events, rows, skipped).length, 0);
}
