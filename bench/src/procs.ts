// Child processes of the benchmark: the sandbox and feedsync run in their own processes so that
// their CPU and memory are separate from the measuring side. Every wait here is bounded.
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { readHwm } from './proc-stats.js';

/** The built CLI; FEEDSYNC_BENCH_CLI measures another build (e.g. one of main) with this bench. */
export const CLI_PATH =
  process.env.FEEDSYNC_BENCH_CLI ?? fileURLToPath(new URL('../../dist/cli.js', import.meta.url));

export interface SandboxInfo {
  scheduling_base_url: string;
  workflow_base_url: string;
  username: string;
  password: string;
  control_url: string;
}

export interface Child {
  proc: ChildProcess;
  pid: number;
  /** Highest VmHWM seen (bytes): sampled periodically and once more before stopping. */
  peakRss(): number;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves with the exit code. Idempotent. */
  stop(graceMs?: number): Promise<number | null>;
  /** Tail of stderr+stdout, for failure messages. */
  output(): string;
}

const live = new Set<ChildProcess>();
// The bench must never leave children behind, even when it throws.
process.once('exit', () => {
  for (const p of live) p.kill('SIGKILL');
});

export function spawnChild(args: string[], opts: { nodeArgs?: string[]; cwd?: string } = {}): Child {
  const proc = spawn(process.execPath, [...(opts.nodeArgs ?? []), CLI_PATH, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    cwd: opts.cwd,
  });
  if (proc.pid === undefined) throw new Error(`cannot start feedsync ${args.join(' ')}`);
  live.add(proc);
  let tail = '';
  const keep = (chunk: Buffer): void => {
    tail = (tail + chunk.toString('utf8')).slice(-4000);
  };
  // Both streams are always drained: a full pipe would stall the child's (synchronous) logger.
  proc.stderr?.on('data', keep);
  proc.stdout?.on('data', keep);
  let peak = 0;
  const sample = (): void => {
    peak = Math.max(peak, readHwm(proc.pid!));
  };
  const sampler = setInterval(sample, 250);
  sampler.unref();
  const exited = new Promise<number | null>((resolve) =>
    proc.once('exit', (code) => {
      clearInterval(sampler);
      live.delete(proc);
      resolve(code);
    }),
  );
  let stopping: Promise<number | null> | undefined;
  return {
    proc,
    pid: proc.pid,
    peakRss: () => {
      if (proc.exitCode === null && proc.signalCode === null) sample();
      return peak;
    },
    output: () => tail,
    stop(graceMs = 15_000) {
      stopping ??= (async () => {
        if (proc.exitCode !== null || proc.signalCode !== null) return proc.exitCode;
        sample(); // VmHWM is gone once the process has exited
        proc.kill('SIGTERM');
        const timer = setTimeout(() => proc.kill('SIGKILL'), graceMs);
        const code = await exited;
        clearTimeout(timer);
        return code;
      })();
      return stopping;
    },
  };
}

/** `feedsync sandbox` as a child; resolves once its JSON ready line is printed. */
export async function startSandboxProcess(opts: {
  backlog: number;
  rate: number;
  seed: number;
}): Promise<{ child: Child; info: SandboxInfo }> {
  const child = spawnChild([
    'sandbox',
    '--port',
    '0',
    '--backlog',
    String(opts.backlog),
    '--rate',
    String(opts.rate),
    '--seed',
    String(opts.seed),
  ]);
  // Generating a 100k backlog takes a while; a minute is far beyond what it needs.
  const info = await new Promise<SandboxInfo>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`sandbox not ready in 60 s: ${child.output()}`)), 60_000);
    const lines = createInterface({ input: child.proc.stdout! });
    lines.once('line', (line) => {
      clearTimeout(timer);
      try {
        resolve(JSON.parse(line) as SandboxInfo);
      } catch (err) {
        reject(new Error(`sandbox printed no JSON ready line (${String(err)}): ${line}`));
      }
    });
    child.proc.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`sandbox exited with ${code} before it was ready: ${child.output()}`));
    });
  });
  return { child, info };
}
