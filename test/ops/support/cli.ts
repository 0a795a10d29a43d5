// One-shot CLI commands (status, cursor, dlq, check-config) run to completion as child processes,
// on top of the shared spawn helper (test/support/process.ts), which tracks every child.
import { spawnCli, type CliProcess } from '../../support/process.js';

export { killAllCli, spawnCli, writeConfig, type CliProcess } from '../../support/process.js';

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `feedsync ...args` to completion (bounded: SIGKILL and a throw after timeoutMs). */
export async function runCli(
  args: string[],
  opts: { env?: Record<string, string>; timeoutMs?: number } = {},
): Promise<CliResult> {
  const p = spawnCli(args, { env: opts.env });
  try {
    const exit = await p.waitForExit(opts.timeoutMs ?? 20_000);
    return { code: exit.code, stdout: p.stdout().join('\n'), stderr: p.stderr().join('\n') };
  } catch (err) {
    await p.stop(100);
    throw new Error(`feedsync ${args.join(' ')}: ${(err as Error).message}`);
  }
}

/** The metrics port a started daemon logged in its "feedsync started" line (log level ≤ info). */
export async function metricsPortOf(proc: CliProcess, timeoutMs = 20_000): Promise<number> {
  const entry = await proc.waitForLog((l) => l.msg === 'feedsync started', timeoutMs, 'feedsync started');
  if (typeof entry.metrics_port !== 'number') throw new Error(`no metrics_port in ${JSON.stringify(entry)}`);
  return entry.metrics_port;
}

/**
 * A daemon (`poll`, `work`) whose queue cannot be opened stays up, logs why on each try (the same
 * text /readyz gives) and exits 0 on SIGTERM at once: returns that text once it matches `pattern`.
 */
export async function startBlockedBy(args: string[], pattern: RegExp, timeoutMs = 15_000): Promise<string> {
  const p = spawnCli(args);
  try {
    const entry = await p.waitForLog(
      (l) => l.msg === 'cannot open the queue; retrying' && pattern.test(String(l.err)),
      timeoutMs,
      `"cannot open the queue" naming ${pattern}`,
    );
    const stopped = Date.now();
    const exit = await p.stop();
    if (exit.code !== 0) throw new Error(`SIGTERM exited ${exit.code}, not 0`);
    if (Date.now() - stopped > 4_000) throw new Error(`SIGTERM took ${Date.now() - stopped} ms`);
    if (p.stderr().some((l) => l.trim() !== '')) throw new Error(`stderr: ${p.stderr().join('\n')}`);
    return [String(entry.err), ...p.stdout()].join('\n');
  } finally {
    await p.stop(100);
  }
}
