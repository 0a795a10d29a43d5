// Start-up: process spawn → first upstream request of `feedsync run` (local queue, one source,
// one jsonl sink, a fresh store). A loopback server stands in for the upstream and records when
// the first request arrives; the child is stopped right after, so nothing else is measured.
// The first run uses an empty compile cache (a new container); the others find it warm.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { CLI_PATH } from './procs.js';

export interface StartupResult {
  runs: number;
  /** Milliseconds per run, in run order; [0] is the cold-cache one. */
  ms: number[];
  coldMs: number;
  /** Median of the warm runs. */
  medianMs: number;
  minMs: number;
}

export async function measureStartup(dir: string, runs: number, timeoutMs = 20_000): Promise<StartupResult> {
  mkdirSync(dir, { recursive: true });
  const cache = join(dir, 'compile-cache');
  const ms: number[] = [];
  for (let i = 0; i < runs; i++) ms.push(await once(join(dir, `run-${i}`), cache, timeoutMs));
  const warm = ms.slice(1).sort((a, b) => a - b);
  return {
    runs,
    ms,
    coldMs: ms[0]!,
    medianMs: warm[Math.floor(warm.length / 2)] ?? ms[0]!,
    minMs: Math.min(...warm),
  };
}

async function once(dir: string, cache: string, timeoutMs: number): Promise<number> {
  const work = mkdtempSync(dir);
  let firstRequestAt: number | undefined;
  let arrived!: () => void;
  const arrival = new Promise<void>((resolve) => (arrived = resolve));
  const server = createServer((_req, res) => {
    firstRequestAt ??= performance.now();
    arrived();
    res.writeHead(503).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const config = join(work, 'feedsync.yaml');
  writeFileSync(
    config,
    [
      `store: { path: ${JSON.stringify(join(work, 'feedsync.db'))} }`,
      'http: { host: 127.0.0.1, port: 0 }',
      'log: { level: warn }',
      'sources:',
      `  - { name: s, service: scheduling, base_url: "http://127.0.0.1:${port}/s", username: u, password: p, start_from: earliest }`,
      'sinks:',
      `  - { name: f, type: jsonl, path: ${JSON.stringify(join(work, 'out.jsonl'))} }`,
      '',
    ].join('\n'),
  );
  const started = performance.now();
  const child = spawn(process.execPath, [CLI_PATH, '--config', config, 'run'], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, NODE_COMPILE_CACHE: cache },
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  try {
    const outcome = await Promise.race([
      arrival.then(() => 'request' as const),
      exited.then(() => 'exit' as const),
      new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), timeoutMs).unref()),
    ]);
    if (outcome !== 'request' || firstRequestAt === undefined)
      throw new Error(`feedsync run made no upstream request (${outcome}): ${stderr.slice(-2000)}`);
    return firstRequestAt - started;
  } finally {
    // A graceful stop, as a real one: Node writes the compile cache as the process exits.
    child.kill('SIGTERM');
    const killer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(killer);
    await new Promise((resolve) => server.close(resolve));
    rmSync(work, { recursive: true, force: true });
  }
}
