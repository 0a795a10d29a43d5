// A redis-server the fault suite can kill -9, restart on the same port with its AOF, and freeze
// (SIGSTOP) — test/support/redis.ts does not hand out the process. A kill can also cut the tail of
// the AOF: what a host crash loses of the writes `appendfsync everysec` had not yet synced.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, truncateSync } from 'node:fs';
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
  /**
   * SIGKILL; nothing flushed beyond what AOF everysec already wrote. With `cutMs`, the newest AOF
   * file is then cut back to the size it had `cutMs` before the kill, as a host crash before the
   * fsync loses those writes; resolves to the bytes cut.
   */
  kill9(cutMs?: number): Promise<number>;
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
  // The newest AOF file's size, sampled: where a cut goes back to. Bounded to the last 10 s.
  const sizes: { t: number; file: string; size: number }[] = [];
  const sampler = setInterval(() => {
    const file = newestAof(dir);
    if (!file) return;
    sizes.push({ t: Date.now(), file, size: statSync(file).size });
    while (sizes.length > 100) sizes.shift();
  }, 100);
  sampler.unref();
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
    async kill9(cutMs = 0) {
      const c = child;
      if (!c) return 0;
      const killedAt = Date.now();
      c.kill('SIGKILL');
      await waitExit(c);
      child = undefined;
      frozen = false;
      if (cutMs <= 0) return 0;
      const file = newestAof(dir);
      const then = [...sizes].reverse().find((s) => s.file === file && s.t <= killedAt - cutMs);
      if (!file || !then) return 0;
      const size = statSync(file).size;
      if (then.size >= size) return 0;
      truncateSync(file, then.size);
      sizes.length = 0;
      return size - then.size;
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
      clearInterval(sampler);
      process.removeListener('exit', onExit);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The AOF file Redis appends to now: the incr file with the highest sequence number (Redis 7). */
function newestAof(dir: string): string | undefined {
  const aofDir = join(dir, 'appendonlydir');
  if (!existsSync(aofDir)) return undefined;
  let best: { seq: number; name: string } | undefined;
  for (const name of readdirSync(aofDir)) {
    const m = /\.(\d+)\.incr\.aof$/.exec(name);
    if (m && (!best || Number(m[1]) > best.seq)) best = { seq: Number(m[1]), name };
  }
  return best && join(aofDir, best.name);
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
