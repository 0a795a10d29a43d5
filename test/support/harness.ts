// In-process end-to-end harness: a sandbox, a daemon configured against it, and readers for what
// the sinks wrote. Each call gets its own temp dir, store and ports.
import { mkdtempSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { validateConfig } from '../../src/config/load.js';
import type { FeedsyncConfig } from '../../src/config/types.js';
import { startDaemon, type Daemon, type DaemonMode } from '../../src/daemon.js';
import type { Change } from '../../src/core/change.js';
import { startSandbox, type Sandbox, type SandboxOptions } from '../../src/sandbox/index.js';

export function tempDir(prefix = 'feedsync-test-'): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export async function withSandbox(opts: SandboxOptions): Promise<Sandbox> {
  return startSandbox({ seed: 7, ...opts });
}

export interface SourceOverrides {
  format?: 'json' | 'xml';
  start_from?: 'latest' | 'earliest' | number;
  expand_subject?: boolean;
  expand_source?: boolean;
  event_types?: string[];
  poll_interval_ms?: number;
  name?: string;
  password?: string;
  timeout_ms?: number;
}

/** A raw (pre-validation) config for the sandbox's services with a jsonl sink in `dir`. */
export function rawConfig(
  sandbox: Sandbox,
  dir: string,
  opts: {
    services?: ('scheduling' | 'workflow')[];
    source?: SourceOverrides;
    sinks?: Record<string, unknown>[];
    queue?: Record<string, unknown>;
  } = {},
): Record<string, unknown> {
  const services = opts.services ?? ['scheduling', 'workflow'];
  return {
    shutdown_timeout_ms: 5000,
    store: { path: join(dir, 'feedsync.db') },
    queue: { backoff_ms: 50, max_backoff_ms: 1000, ...opts.queue },
    sources: services.map((service) => ({
      name: service,
      service,
      base_url: service === 'scheduling' ? sandbox.schedulingBaseUrl : sandbox.workflowBaseUrl,
      username: sandbox.username,
      password: sandbox.password,
      start_from: 'earliest',
      poll_interval_ms: 100,
      timeout_ms: 2000,
      ...opts.source,
      ...(opts.source?.name ? { name: `${opts.source.name}-${service}` } : {}),
    })),
    sinks: opts.sinks ?? [{ name: 'file', type: 'jsonl', path: join(dir, 'changes.jsonl') }],
    http: { host: '127.0.0.1', port: 0 },
    log: { level: process.env.FEEDSYNC_TEST_LOG ?? 'silent' },
  };
}

export async function startTestDaemon(
  raw: Record<string, unknown>,
  dir: string,
  mode: DaemonMode = 'run',
): Promise<{ daemon: Daemon; config: FeedsyncConfig }> {
  const config = validateConfig(raw, { dir });
  const logger = pino({ level: config.log.level });
  const daemon = await startDaemon({ config, configDir: dir, mode, logger, version: 'test' });
  return { daemon, config };
}

/** Every complete line of a jsonl file (a torn last line after a crash is ignored). */
export function readJsonl(path: string): Change[] {
  if (!existsSync(path)) return [];
  const out: Change[] = [];
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    try {
      out.push(JSON.parse(line) as Change);
    } catch {
      // torn write from a killed process; the change is redelivered on a later line
    }
  }
  return out;
}

/** Poll `check` until it returns true or the time runs out (bounded). */
export async function waitFor(
  check: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}
