// The feedsync processes of a fault run, by slot (run-a, p1, w2…): started from a private copy of
// dist/ (a rebuild of dist/ by someone else mid-run cannot pull the CLI away between restarts),
// killed, frozen and thawed on demand, and restarted like an orchestrator would when one exits by
// itself. Every life of every process (pid, start, end, how it ended) goes into the history.
import { cpSync, existsSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { CliProcess, LogEntry, SpawnCliOptions } from '../support/process.js';
import type { ProcessLife } from './types.js';

const ROOT = resolve(import.meta.dirname, '../..');

type SpawnCli = (args: string[], opts?: SpawnCliOptions) => CliProcess;
let spawnCliFn: SpawnCli | undefined;
let killAll: (() => Promise<void>) | undefined;
let snapshotDir: string | undefined;

/**
 * Copies dist/ (with package.json and a link to node_modules) to a temp dir once per test process
 * and loads test/support/process.ts pointed at it. FEEDSYNC_TEST_CLI set by the caller wins.
 */
export async function cliSpawner(): Promise<{ spawnCli: SpawnCli; killAllCli: () => Promise<void> }> {
  if (!spawnCliFn) {
    if (!process.env.FEEDSYNC_TEST_CLI) {
      if (!existsSync(join(ROOT, 'dist/cli.js'))) throw new Error('dist/cli.js is missing: npm run build');
      snapshotDir = mkdtempSync(join(tmpdir(), 'feedsync-faults-cli-'));
      cpSync(join(ROOT, 'dist'), join(snapshotDir, 'dist'), { recursive: true });
      cpSync(join(ROOT, 'package.json'), join(snapshotDir, 'package.json'));
      symlinkSync(join(ROOT, 'node_modules'), join(snapshotDir, 'node_modules'));
      process.env.FEEDSYNC_TEST_CLI = join(snapshotDir, 'dist/cli.js');
      const dir = snapshotDir;
      process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
    }
    const mod = await import('../support/process.js');
    spawnCliFn = mod.spawnCli;
    killAll = mod.killAllCli;
  }
  return { spawnCli: spawnCliFn, killAllCli: killAll! };
}

export interface SlotSpec {
  name: string;
  role: 'run' | 'poll' | 'work';
  configPath: string;
  env?: Record<string, string>;
}

interface Slot extends SlotSpec {
  proc?: CliProcess;
  life?: ProcessLife;
  frozen: boolean;
  killing: boolean;
  restartTimer?: NodeJS.Timeout;
  crashes: number;
}

export class Supervisor {
  readonly lives: ProcessLife[] = [];
  /** Every process ever started, for log lines after they exited. */
  readonly procs: { slot: string; proc: CliProcess }[] = [];
  /** Processes that exited by themselves (not killed, not stopped), with their last error. */
  readonly exits: { slot: string; pid: number; code: number | null; reason: string }[] = [];
  private readonly slots = new Map<string, Slot>();
  private stopping = false;

  private constructor(
    private readonly spawnCli: SpawnCli,
    private readonly now: () => number,
    private readonly log: (line: string) => void,
    private readonly echo: boolean,
  ) {}

  static async create(now: () => number, log: (line: string) => void): Promise<Supervisor> {
    const { spawnCli } = await cliSpawner();
    return new Supervisor(spawnCli, now, log, !!process.env.FAULT_ECHO);
  }

  add(spec: SlotSpec): void {
    this.slots.set(spec.name, { ...spec, frozen: false, killing: false, crashes: 0 });
  }

  names(role?: SlotSpec['role']): string[] {
    return [...this.slots.values()].filter((s) => !role || s.role === role).map((s) => s.name);
  }

  proc(name: string): CliProcess | undefined {
    const s = this.slot(name);
    return s.proc && !s.proc.exit ? s.proc : undefined;
  }

  pid(name: string): number | undefined {
    return this.proc(name)?.pid;
  }

  slotOfPid(pid: number): string | undefined {
    return [...this.slots.values()].find((s) => s.proc?.pid === pid)?.name;
  }

  isFrozen(name: string): boolean {
    return this.slot(name).frozen;
  }

  running(name: string): boolean {
    return !!this.proc(name);
  }

  /** Starts the slot's process (no-op if it runs). */
  start(name: string): CliProcess {
    const slot = this.slot(name);
    clearTimeout(slot.restartTimer);
    slot.restartTimer = undefined;
    if (slot.proc && !slot.proc.exit) return slot.proc;
    const proc = this.spawnCli([slot.role], {
      config: slot.configPath,
      env: { ...slot.env, SLOT: slot.name },
      echo: this.echo ? `[${slot.name}]` : undefined,
    });
    const life: ProcessLife = { name: slot.name, role: slot.role, pid: proc.pid, start: this.now() };
    this.lives.push(life);
    this.procs.push({ slot: slot.name, proc });
    slot.proc = proc;
    slot.life = life;
    slot.frozen = false;
    slot.killing = false;
    proc.child.once('close', (code) => {
      if (life.end === undefined) life.end = this.now();
      if (!life.how) {
        life.how = 'exited';
        life.code = code;
        this.exits.push({ slot: slot.name, pid: proc.pid, code, reason: lastError(proc) });
        this.log(`${slot.name} (pid ${proc.pid}) exited by itself with code ${code}: ${lastError(proc)}`);
        if (!this.stopping && slot.proc === proc) {
          slot.crashes++;
          const delay = Math.min(5_000, 500 * slot.crashes);
          slot.restartTimer = setTimeout(() => {
            if (!this.stopping && slot.proc === proc) this.start(slot.name);
          }, delay);
        }
      }
    });
    return proc;
  }

  /** kill -9; returns the pid killed (undefined if it was not running). */
  kill9(name: string): number | undefined {
    const slot = this.slot(name);
    const proc = slot.proc;
    if (!proc || proc.exit) return undefined;
    slot.life!.how = 'killed';
    slot.life!.end = this.now();
    slot.life!.code = null;
    proc.child.kill('SIGKILL');
    slot.frozen = false;
    return proc.pid;
  }

  freeze(name: string): number | undefined {
    const slot = this.slot(name);
    const proc = slot.proc;
    if (!proc || proc.exit || slot.frozen) return undefined;
    proc.child.kill('SIGSTOP');
    slot.frozen = true;
    return proc.pid;
  }

  thaw(name: string): number | undefined {
    const slot = this.slot(name);
    const proc = slot.proc;
    if (!proc || !slot.frozen) return undefined;
    slot.frozen = false;
    if (!proc.exit) proc.child.kill('SIGCONT');
    return proc.pid;
  }

  /** Thaws everything frozen and starts every slot not running. */
  heal(): void {
    for (const name of this.slots.keys()) {
      this.thaw(name);
      if (!this.running(name)) this.start(name);
    }
  }

  /**
   * Starts the slot and waits for its "feedsync started" line. A process that exits first is
   * restarted (as after any exit) and waited for again, up to timeoutMs in all.
   */
  async startAndWait(name: string, timeoutMs: number): Promise<void> {
    const slot = this.slot(name);
    if (!slot.proc || slot.proc.exit) this.start(name);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const p = slot.proc;
      if (p && !p.exit && p.logs().some((e) => e.msg === 'feedsync started')) return;
      if (Date.now() > deadline)
        throw new Error(
          `${name} did not start within ${timeoutMs} ms; last output:\n${p?.text().slice(-2000) ?? ''}`,
        );
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Metrics port of each live process (from its "feedsync started" line). */
  metricsPorts(): { pid: number; slot: string; port: number }[] {
    const out: { pid: number; slot: string; port: number }[] = [];
    for (const s of this.slots.values()) {
      const p = s.proc;
      if (!p || p.exit || s.frozen) continue;
      const started = p.logs().find((e) => e.msg === 'feedsync started');
      const port = Number(started?.metrics_port);
      if (port > 0) out.push({ pid: p.pid, slot: s.name, port });
    }
    return out;
  }

  /** Every parsed log line of every process started, with its pid. */
  allLogs(): { pid: number; slot: string; entry: LogEntry }[] {
    return this.procs.flatMap(({ slot, proc }) =>
      proc.logs().map((entry) => ({ pid: proc.pid, slot, entry })),
    );
  }

  /** SIGTERM every process (thawing frozen ones first), SIGKILL after graceMs. */
  async stopAll(graceMs: number): Promise<void> {
    this.stopping = true;
    await Promise.all(
      [...this.slots.values()].map(async (s) => {
        clearTimeout(s.restartTimer);
        const p = s.proc;
        if (!p || p.exit) return;
        if (s.frozen) p.child.kill('SIGCONT');
        s.frozen = false;
        if (s.life && !s.life.how) s.life.how = 'stopped';
        const exit = await p.stop(graceMs);
        if (s.life) {
          s.life.end ??= this.now();
          s.life.code = exit.code;
        }
      }),
    );
  }

  /** Last resort (afterAll): SIGKILL everything still running. */
  async killEverything(): Promise<void> {
    this.stopping = true;
    for (const s of this.slots.values()) {
      clearTimeout(s.restartTimer);
      if (s.proc && !s.proc.exit) {
        s.proc.child.kill('SIGCONT');
        s.proc.child.kill('SIGKILL');
      }
    }
    await killAll?.();
  }

  private slot(name: string): Slot {
    const s = this.slots.get(name);
    if (!s) throw new Error(`no process slot ${name}`);
    return s;
  }
}

function lastError(proc: CliProcess): string {
  const errs = proc
    .logs()
    .filter((e) => (e.level ?? 0) >= 50)
    .map((e) => `${e.msg}${e.err ? `: ${String(e.err)}` : ''}`);
  const tail = errs.at(-1) ?? proc.stderr().slice(-3).join(' | ');
  return tail.slice(0, 400);
}

/** Writes a small JSON file atomically for the recorder sink (written aside, renamed over). */
export function writeJsonFile(path: string, value: unknown): void {
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(value));
  renameSync(tmp, path);
}
