// CPU per event of `feedsync run` (local queue, jsonl sink) draining a sandbox backlog, and the
// wall time of `feedsync status` on a store holding many queued changes. Tooling, not product: it
// drives the built product in ../dist as separate processes and reads their CPU time from /proc
// (Linux). Run with Node 24 (types are stripped): `npm run build && node bench/cpu.ts --help`.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, readSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
// Run type-stripped, so these name the .ts files; tsc compiles the same modules for `npm run bench`.
import { cpuUs, readHwm } from './src/proc-stats.ts';
import { topSelfTime } from './src/profile.ts';
import { statusTime } from './src/status-time.ts';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

const { values: opts } = parseArgs({
  options: {
    service: { type: 'string', multiple: true },
    events: { type: 'string', default: '20000' },
    format: { type: 'string', default: 'json' },
    profile: { type: 'string' },
    status: { type: 'string' },
    dist: { type: 'string', default: join(root, 'dist') },
    'node-flag': { type: 'string', multiple: true, default: [] },
    help: { type: 'boolean', default: false },
  },
});
if (opts.help) {
  console.log(`node bench/cpu.ts [--service scheduling|workflow]... [--events N] [--format json|xml]
                    [--profile DIR] [--status N] [--dist DIR]
  Drains a sandbox backlog of N events per service with \`feedsync run\` (local queue, expand,
  jsonl sink) and prints CPU µs per event (user+sys of the run process / events), also after the
  first line was written (start-up excluded), wall time and peak RSS.
  --profile DIR  run under --cpu-prof and write DIR/cpu-profile-<service>.txt (top 10 self time)
  --status N     also time \`feedsync status\` on a store holding N queued changes
  --dist DIR     the built product to measure (default: ./dist), e.g. a build of main
  --node-flag F  start \`feedsync run\` with this node flag (repeatable), e.g. --node-flag=--max-semi-space-size=16`);
  process.exit(0);
}
const dist = resolve(opts.dist!);
const cli = join(dist, 'cli.js');

interface CpuSample {
  cpuUs: number;
  rssPeakBytes: number;
}

function sample(pid: number): CpuSample {
  return { cpuUs: cpuUs(pid) ?? 0, rssPeakBytes: readHwm(pid) };
}

/** Newline count of a growing file, reading only what was appended since the last call. */
function lineCounter(path: string): () => number {
  let offset = 0;
  let lines = 0;
  const buf = Buffer.alloc(1 << 20);
  return () => {
    let fd: number;
    try {
      fd = openSync(path, 'r');
    } catch {
      return 0;
    }
    try {
      for (;;) {
        const n = readSync(fd, buf, 0, buf.length, offset);
        if (n === 0) break;
        offset += n;
        for (let i = 0; i < n; i++) if (buf[i] === 10) lines++;
      }
    } finally {
      closeSync(fd);
    }
    return lines;
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function exited(child: ChildProcess): Promise<void> {
  return child.exitCode !== null ? Promise.resolve() : new Promise((r) => child.once('exit', () => r()));
}

async function startSandbox(dir: string, backlog: number) {
  const out = join(dir, 'sandbox.json');
  const fd = openSync(out, 'w');
  const child = spawn(
    process.execPath,
    [cli, 'sandbox', '--port', '0', '--backlog', String(backlog), '--rate', '0', '--seed', '3'],
    { stdio: ['ignore', fd, 'ignore'] },
  );
  closeSync(fd);
  for (let i = 0; i < 3000; i++) {
    const text = readFileSync(out, 'utf8');
    if (text.includes('password')) {
      const info = JSON.parse(text) as Record<string, string>;
      return { child, info };
    }
    await sleep(100);
  }
  child.kill();
  throw new Error('the sandbox did not start within 300 s');
}

async function drain(service: string, events: number, format: string, profileDir?: string) {
  const dir = mkdtempSync(join(tmpdir(), `feedsync-cpu-${service}-`));
  const sandbox = await startSandbox(dir, events);
  try {
    const jsonl = join(dir, 'changes.jsonl');
    const config = {
      store: { path: join(dir, 'feedsync.db') },
      queue: { driver: 'local' },
      sources: [
        {
          name: service,
          service,
          base_url: sandbox.info[`${service}_base_url`],
          username: sandbox.info.username,
          password: sandbox.info.password,
          format,
          start_from: 'earliest',
          poll_interval_ms: 1000,
          // As in \`npm run bench\`: on loopback compression only costs CPU on both sides.
          compression: false,
        },
      ],
      sinks: [{ name: 'file', type: 'jsonl', path: jsonl }],
      http: { host: '127.0.0.1', port: 0 },
      log: { level: 'warn' },
    };
    writeFileSync(join(dir, 'feedsync.json'), JSON.stringify(config));
    const nodeArgs = [
      ...opts['node-flag']!,
      ...(profileDir ? ['--cpu-prof', `--cpu-prof-dir=${dir}/prof`] : []),
    ];
    const started = performance.now();
    const run = spawn(process.execPath, [...nodeArgs, cli, 'run', '--config', join(dir, 'feedsync.json')], {
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    const lines = lineCounter(jsonl);
    let first: CpuSample | undefined;
    let last: CpuSample | undefined;
    const deadline = Date.now() + 600_000;
    while (Date.now() < deadline && run.exitCode === null) {
      const n = lines();
      if (!first && n > 0) first = sample(run.pid!);
      if (n >= events) {
        last = sample(run.pid!);
        break;
      }
      await sleep(20);
    }
    const wall = (performance.now() - started) / 1000;
    run.kill('SIGTERM');
    await exited(run);
    if (!first || !last)
      throw new Error(`${service}: the run process delivered too little (exit ${run.exitCode})`);
    const result = {
      service,
      format,
      events,
      wall_s: Number(wall.toFixed(2)),
      cpu_us_per_event: Math.round(last.cpuUs / events),
      cpu_us_per_event_after_first_line: Math.round((last.cpuUs - first.cpuUs) / events),
      start_to_first_line_cpu_ms: Math.round(first.cpuUs / 1000),
      peak_rss_mb: Math.round(last.rssPeakBytes / (1024 * 1024)),
    };
    if (profileDir) {
      const summary = topSelfTime(join(dir, 'prof'), 10, [JSON.stringify(result)]);
      writeFileSync(join(profileDir, `cpu-profile-${service}.txt`), summary);
    }
    return result;
  } finally {
    sandbox.child.kill();
    await exited(sandbox.child);
  }
}

const services = opts.service ?? ['scheduling', 'workflow'];
for (const service of services)
  console.log(JSON.stringify(await drain(service, Number(opts.events), opts.format!, opts.profile)));
if (opts.status) {
  const dir = mkdtempSync(join(tmpdir(), 'feedsync-status-'));
  console.log(JSON.stringify(await statusTime({ count: Number(opts.status), dist, dir })));
}
