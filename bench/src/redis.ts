// A private redis-server for the bullmq runs (the bench is built on its own and cannot import
// test/support/redis.ts; this is the small part of it the benchmark needs).
import { mkdtempSync, rmSync } from 'node:fs';
import { existsSync } from 'node:fs';
import { createServer, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';

export interface BenchRedis {
  url: string;
  /** The redis-server process, for its CPU time (proc-stats.ts). */
  pid: number;
  stop(): Promise<void>;
}

function findRedis(): string {
  const dirs = ['/usr/bin', '/usr/local/bin', ...(process.env.PATH ?? '').split(':')];
  for (const dir of dirs) if (dir && existsSync(join(dir, 'redis-server'))) return join(dir, 'redis-server');
  throw new Error('redis-server not found (apt-get install -y redis-server): needed for the bullmq runs');
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const a = srv.address();
      const port = typeof a === 'object' && a ? a.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = new Socket();
    let data = '';
    const done = (ok: boolean): void => {
      s.destroy();
      resolve(ok);
    };
    s.setTimeout(500, () => done(false));
    s.once('error', () => done(false));
    s.on('data', (c) => {
      data += c.toString('utf8');
      if (data.includes('\r\n')) done(data.startsWith('+PONG'));
    });
    s.connect(port, '127.0.0.1', () => s.write('PING\r\n'));
  });
}

export async function startBenchRedis(): Promise<BenchRedis> {
  const bin = findRedis();
  const dir = mkdtempSync(join(tmpdir(), 'feedsync-bench-redis-'));
  const port = await freePort();
  // AOF with fsync every second (Redis's default policy), as a production Redis for feedsync runs:
  // `feedsync poll` refuses a Redis that does not persist (it keeps the cursors there), and the
  // bullmq figures should include what persistence costs.
  const child = spawn(
    bin,
    [
      ...['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', ''],
      ...['--appendonly', 'yes', '--appendfsync', 'everysec'],
    ],
    { stdio: 'ignore' },
  );
  const kill = (): void => void child.kill('SIGKILL');
  process.once('exit', kill);
  const deadline = Date.now() + 10_000;
  while (!(await ping(port))) {
    if (Date.now() > deadline || child.exitCode !== null) {
      child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`redis-server on port ${port} did not answer PING within 10 s`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url: `redis://127.0.0.1:${port}`,
    pid: child.pid!,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        const t = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(t);
      }
      process.removeListener('exit', kill);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
