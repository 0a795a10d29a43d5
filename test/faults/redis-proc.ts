// A redis-server the fault suite can kill -9, restart on the same port with its AOF, and freeze
// (SIGSTOP) — test/support/redis.ts does not hand out the process.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../support/redis.js';

export interface RedisProc {
  url: string;
  port: number;
  readonly pid: number | undefined;
  readonly running: boolean;
  readonly frozen: boolean;
  /** SIGKILL; nothing flushed beyond what AOF everysec already wrote. */
  kill9(): Promise<void>;
  /** Starts again on the same port and directory (AOF replayed); resolves once it answers PING. */
  start(): Promise<void>;
  freeze(): void;
  thaw(): void;
  stop(): Promise<void>;
}

export function redisBinary(): string | undefined {
  for (const c of ['/usr/bin/redis-server', '/usr/local/bin/redis-server']) if (existsSync(c)) return c;
  const r = spawnSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : undefined;
}

export async function startRedisProc(): Promise<RedisProc> {
  const bin = redisBinary();
  if (!bin) throw new Error('redis-server not found (scripts/ensure-test-deps.sh installs it)');
  const dir = mkdtempSync(join(tmpdir(), 'feedsync-faults-redis-'));
  const port = await freePort();
  let child: ChildProcess | undefined;
  let frozen = false;
  const onExit = () => child?.kill('SIGKILL');
  process.once('exit', onExit);

  async function spawnIt(): Promise<void> {
    const c = spawn(
      bin!,
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--dir',
        dir,
        '--appendonly',
        'yes',
        '--appendfsync',
        'everysec',
        '--save',
        '',
        '--daemonize',
        'no',
        '--loglevel',
        'warning',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let err = '';
    c.stderr?.on('data', (b: Buffer) => {
      if (err.length < 4000) err += b.toString('utf8');
    });
    child = c;
    frozen = false;
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline) {
      if (c.exitCode !== null || c.signalCode !== null)
        throw new Error(`redis-server exited at start: ${err}`);
      if (await ping(port)) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`redis-server on ${port} did not answer PING in 15 s`);
  }

  async function waitExit(c: ChildProcess): Promise<void> {
    if (c.exitCode !== null || c.signalCode !== null) return;
    await new Promise<void>((resolve) => c.once('exit', () => resolve()));
  }

  await spawnIt();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    get pid() {
      return child?.pid;
    },
    get running() {
      return !!child && child.exitCode === null && child.signalCode === null;
    },
    get frozen() {
      return frozen;
    },
    async kill9() {
      const c = child;
      if (!c) return;
      c.kill('SIGKILL');
      await waitExit(c);
      child = undefined;
      frozen = false;
    },
    async start() {
      if (child && child.exitCode === null && child.signalCode === null) return;
      // The port may be briefly unavailable right after a kill: retry.
      for (let attempt = 0; ; attempt++) {
        try {
          await spawnIt();
          return;
        } catch (err) {
          if (attempt >= 5) throw err;
          await new Promise((r) => setTimeout(r, 300));
        }
      }
    },
    freeze() {
      if (!child) return;
      child.kill('SIGSTOP');
      frozen = true;
    },
    thaw() {
      if (!child) return;
      child.kill('SIGCONT');
      frozen = false;
    },
    async stop() {
      const c = child;
      if (c) {
        if (frozen) c.kill('SIGCONT');
        c.kill('SIGKILL');
        await waitExit(c);
      }
      child = undefined;
      process.removeListener('exit', onExit);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = new Socket();
    let data = '';
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.once('error', () => done(false));
    socket.on('data', (chunk) => {
      data += chunk.toString('utf8');
      // -LOADING while the AOF is replayed: not ready yet.
      if (data.includes('\r\n')) done(data.startsWith('+PONG'));
    });
    socket.connect(port, '127.0.0.1', () => socket.write('PING\r\n'));
  });
}
