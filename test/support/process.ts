// Child-process harness for tests that run the built CLI (`node dist/cli.js …`) as a real process.
// The CLI is started with process.execPath directly (never npx/npm exec: they do not forward
// signals), its stdout/stderr are collected line by line, and every child started here is tracked
// so that `killAllCli()` in afterEach/afterAll can guarantee nothing is left running.
//
// Typical use:
//   const configPath = writeConfig(dir, raw);             // raw = harness.rawConfig(...)
//   const p = spawnCli(['run'], { config: configPath });
//   await p.waitForLog((l) => l.msg === 'feedsync started', 10_000);
//   p.signal('SIGTERM');
//   const { code } = await p.waitForExit(8_000);
//   afterEach(() => killAllCli());
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { stringify } from 'yaml';

/**
 * The built CLI entry point (vitest's global setup builds dist/ before the run).
 * `FEEDSYNC_TEST_CLI=/path/to/cli.js` points the tests at another build (e.g. a copy that a
 * concurrent rebuild of dist/ cannot remove mid-run).
 */
export const cliPath = process.env.FEEDSYNC_TEST_CLI ?? resolve(import.meta.dirname, '../../dist/cli.js');

export type Stream = 'stdout' | 'stderr';

export interface OutputLine {
  stream: Stream;
  line: string;
  /** ms since the process was spawned */
  at: number;
}

/** A parsed pino JSON log line (stdout); other lines are not included. */
export type LogEntry = Record<string, unknown> & { msg?: string; level?: number };

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface SpawnCliOptions {
  /** Passed as `--config FILE` before the command's own arguments. */
  config?: string;
  cwd?: string;
  /** Merged over process.env (a value of undefined removes the variable). */
  env?: Record<string, string | undefined>;
  /** Echo each output line to the test's stderr with this prefix (debugging aid). */
  echo?: string;
  /** Another build's cli.js (an earlier release, test/support/release-build.ts). */
  cli?: string;
}

export interface CliProcess {
  readonly child: ChildProcess;
  readonly pid: number;
  /** Every complete output line so far, both streams, in arrival order. */
  readonly output: readonly OutputLine[];
  stdout(): string[];
  stderr(): string[];
  /** stdout lines that parse as JSON objects (pino logs, the sandbox's ready line, …). */
  logs(): LogEntry[];
  /** Both streams joined, for failure messages. */
  text(): string;
  /** Set once the process has exited (both streams are then fully read). */
  readonly exit: ExitInfo | undefined;
  /**
   * Resolves with the first line (already seen or future) that matches; rejects on timeout or if
   * the process exits first, with the recent output in the message.
   */
  waitForLine(
    match: string | RegExp | ((line: string, stream: Stream) => boolean),
    timeoutMs: number,
    what?: string,
  ): Promise<string>;
  /** Like waitForLine for parsed JSON log lines on stdout. */
  waitForLog(match: (entry: LogEntry) => boolean, timeoutMs: number, what?: string): Promise<LogEntry>;
  /** Resolves with the exit code/signal; rejects if the process is still running after timeoutMs. */
  waitForExit(timeoutMs: number): Promise<ExitInfo>;
  /** Sends a signal (no-op once exited). */
  signal(sig: NodeJS.Signals): void;
  /** SIGTERM, then SIGKILL if it has not exited after graceMs; resolves when it has exited. */
  stop(graceMs?: number): Promise<ExitInfo>;
}

const running = new Set<CliProcess>();

function parseJsonObject(line: string): LogEntry | undefined {
  if (!line.startsWith('{')) return undefined;
  try {
    const v: unknown = JSON.parse(line);
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as LogEntry) : undefined;
  } catch {
    return undefined;
  }
}

/** Writes a raw config object as YAML to `dir/name` and returns its path. */
export function writeConfig(dir: string, raw: Record<string, unknown>, name = 'feedsync.yaml'): string {
  const path = join(dir, name);
  writeFileSync(path, stringify(raw));
  return path;
}

/** Spawns `node dist/cli.js [--config FILE] ...args` and starts collecting its output. */
export function spawnCli(args: string[], opts: SpawnCliOptions = {}): CliProcess {
  const argv = [opts.cli ?? cliPath, ...(opts.config ? ['--config', opts.config] : []), ...args];
  const env: Record<string, string | undefined> = { ...process.env, ...opts.env };
  // The parent's config location must not leak into the child unless the test asks for it.
  if (!opts.env || !('FEEDSYNC_CONFIG' in opts.env)) delete env.FEEDSYNC_CONFIG;
  const child = spawn(process.execPath, argv, {
    cwd: opts.cwd,
    env: env as NodeJS.ProcessEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const started = Date.now();
  const output: OutputLine[] = [];
  const listeners = new Set<() => void>();
  const notify = () => {
    for (const l of [...listeners]) l();
  };
  let exit: ExitInfo | undefined;
  let spawnError: Error | undefined;

  const collect = (stream: Stream) => {
    let partial = '';
    const s = child[stream]!;
    s.setEncoding('utf8');
    s.on('data', (chunk: string) => {
      partial += chunk;
      const parts = partial.split('\n');
      partial = parts.pop()!;
      for (const line of parts) {
        output.push({ stream, line, at: Date.now() - started });
        if (opts.echo) process.stderr.write(`${opts.echo} ${stream}: ${line}\n`);
      }
      if (parts.length) notify();
    });
    s.on('end', () => {
      if (partial) output.push({ stream, line: partial, at: Date.now() - started });
      partial = '';
      notify();
    });
  };
  collect('stdout');
  collect('stderr');
  child.on('error', (err) => {
    spawnError = err;
    exit ??= { code: null, signal: null };
    running.delete(proc);
    notify();
  });
  // 'close' (not 'exit'): fires after both streams ended, so no output line is missed.
  child.on('close', (code, signal) => {
    exit = { code, signal };
    running.delete(proc);
    notify();
  });

  const tail = () =>
    output
      .slice(-40)
      .map((o) => `[${o.stream}] ${o.line}`)
      .join('\n');

  const waitUntil = <T>(
    probe: () => T | undefined,
    timeoutMs: number,
    what: string,
    failOnExit: boolean,
  ): Promise<T> =>
    new Promise<T>((resolvePromise, reject) => {
      const done = () => {
        listeners.delete(check);
        clearTimeout(timer);
      };
      const check = () => {
        const found = probe();
        if (found !== undefined) {
          done();
          resolvePromise(found);
        } else if (failOnExit && exit) {
          done();
          reject(
            new Error(
              `process ${child.pid} (${args.join(' ')}) exited (code ${exit.code}, signal ${exit.signal})` +
                `${spawnError ? ` [${spawnError.message}]` : ''} before ${what}; last output:\n${tail()}`,
            ),
          );
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last output:\n${tail()}`));
      }, timeoutMs);
      listeners.add(check);
      check();
    });

  const proc: CliProcess = {
    child,
    pid: child.pid ?? -1,
    output,
    stdout: () => output.filter((o) => o.stream === 'stdout').map((o) => o.line),
    stderr: () => output.filter((o) => o.stream === 'stderr').map((o) => o.line),
    logs: () =>
      output
        .filter((o) => o.stream === 'stdout')
        .map((o) => parseJsonObject(o.line))
        .filter((e): e is LogEntry => e !== undefined),
    text: () => output.map((o) => `[${o.stream}] ${o.line}`).join('\n'),
    get exit() {
      return exit;
    },
    waitForLine(match, timeoutMs, what) {
      const test =
        typeof match === 'function'
          ? match
          : typeof match === 'string'
            ? (l: string) => l.includes(match)
            : (l: string) => match.test(l);
      let from = 0;
      return waitUntil(
        () => {
          for (; from < output.length; from++) {
            const o = output[from]!;
            if (test(o.line, o.stream)) return o.line;
          }
          return undefined;
        },
        timeoutMs,
        what ?? `a line matching ${String(match)}`,
        true,
      );
    },
    waitForLog(match, timeoutMs, what) {
      let from = 0;
      return waitUntil(
        () => {
          for (; from < output.length; from++) {
            const o = output[from]!;
            if (o.stream !== 'stdout') continue;
            const entry = parseJsonObject(o.line);
            if (entry && match(entry)) return entry;
          }
          return undefined;
        },
        timeoutMs,
        what ?? 'a matching log line',
        true,
      );
    },
    waitForExit(timeoutMs) {
      return waitUntil(() => exit, timeoutMs, `process ${child.pid} to exit`, false);
    },
    signal(sig) {
      if (!exit && child.exitCode === null && child.signalCode === null) child.kill(sig);
    },
    async stop(graceMs = 5000) {
      if (exit) return exit;
      proc.signal('SIGTERM');
      try {
        return await proc.waitForExit(graceMs);
      } catch {
        proc.signal('SIGKILL');
        return proc.waitForExit(5000);
      }
    },
  };
  running.add(proc);
  return proc;
}

/** Every CLI process started by spawnCli that has not exited yet. */
export function runningCli(): CliProcess[] {
  return [...running];
}

/** SIGKILLs every still-running CLI process started here and waits for them; for afterEach/afterAll. */
export async function killAllCli(): Promise<void> {
  await Promise.all(
    [...running].map(async (p) => {
      p.signal('SIGKILL');
      await p.waitForExit(5000).catch(() => undefined);
    }),
  );
}
