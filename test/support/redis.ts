// A real Redis for integration tests: a private redis-server child process on 127.0.0.1 with its own
// temp dir, or (only when redis-server is missing and Docker is reachable) a redis:7 container.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface RedisServer {
  /** redis://127.0.0.1:PORT */
  url: string;
  port: number;
  /** With `tls`: rediss://127.0.0.1:TLS_PORT (with the password, if any) and that port. */
  tlsUrl?: string;
  tlsPort?: number;
  /** Graceful shutdown (SIGTERM: with appendonly the AOF is flushed). Idempotent. */
  stop(): Promise<void>;
  /** stop + start on the same port and dir; data is kept (AOF, or the RDB a graceful stop saves). */
  restart(): Promise<void>;
  /** SIGKILL, no flush. */
  kill(): void;
}

export interface StartRedisOptions {
  appendonly?: boolean;
  /**
   * Without appendonly the server still has an RDB save point (one save an hour, so nothing is
   * written during a test) unless this is false: `feedsync poll` refuses a Redis that persists
   * nothing (queue.allow_volatile_redis), and only the test of that refusal wants one.
   */
  snapshots?: boolean;
  /** Require this password (AUTH); `url` then carries it. Local redis-server only. */
  requirepass?: string;
  /** Serve TLS too, on another port (the plain one stays, for setup). Local redis-server only. */
  tls?: RedisTlsFiles;
}

export interface RedisTlsFiles {
  /** PEM files: the server's certificate and key, and the CA client certificates must chain to. */
  certFile: string;
  keyFile: string;
  caFile: string;
  /** Require a client certificate (`tls-auth-clients yes`); default no. */
  authClients?: boolean;
}

interface LocalExtras {
  requirepass?: string;
  tls?: RedisTlsFiles;
}

const REDIS_BIN_CANDIDATES = ['/usr/bin/redis-server', '/usr/local/bin/redis-server'];
const READY_TIMEOUT_MS = 10_000;
const STOP_TIMEOUT_MS = 5_000;

export async function startRedis(opts: StartRedisOptions = {}): Promise<RedisServer> {
  const bin = findRedisBinary();
  const persistence = { appendonly: opts.appendonly ?? false, snapshots: opts.snapshots ?? true };
  if (bin) return startLocal(bin, persistence, { requirepass: opts.requirepass, tls: opts.tls });
  if (process.env.DOCKER_HOST || existsSync('/var/run/docker.sock')) return startContainer(persistence);
  throw new Error(
    'no Redis available for tests: install redis-server (apt-get install -y redis-server) or make Docker reachable',
  );
}

function findRedisBinary(): string | undefined {
  for (const candidate of REDIS_BIN_CANDIDATES) if (existsSync(candidate)) return candidate;
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (dir && existsSync(join(dir, 'redis-server'))) return join(dir, 'redis-server');
  }
  return undefined;
}

interface Persistence {
  appendonly: boolean;
  snapshots: boolean;
}

function persistenceArgs(p: Persistence): string[] {
  return ['--save', p.snapshots ? '3600 1' : '', '--appendonly', p.appendonly ? 'yes' : 'no'];
}

async function startLocal(bin: string, persistence: Persistence, extras: LocalExtras): Promise<RedisServer> {
  const { requirepass } = extras;
  const dir = mkdtempSync(join(tmpdir(), 'feedsync-redis-'));
  let child: ChildProcess | undefined;
  let port = 0;
  let tlsPort: number | undefined;
  // Another process can grab the port between our probe and redis binding it: retry a few times.
  for (let attempt = 0; attempt < 5 && !child; attempt++) {
    port = await freePort();
    tlsPort = extras.tls ? await freePort() : undefined;
    try {
      child = await spawnRedis(bin, port, dir, persistence, extras, tlsPort);
    } catch (err) {
      if (attempt === 4) {
        rmSync(dir, { recursive: true, force: true });
        throw err;
      }
    }
  }
  let removed = false;
  const cleanupDir = (): void => {
    if (removed) return;
    removed = true;
    rmSync(dir, { recursive: true, force: true });
  };
  const auth = requirepass ? `:${encodeURIComponent(requirepass)}@` : '';
  const server: RedisServer = {
    url: `redis://${auth}127.0.0.1:${port}`,
    port,
    ...(tlsPort !== undefined && { tlsUrl: `rediss://${auth}127.0.0.1:${tlsPort}`, tlsPort }),
    async stop() {
      await stopChild(child);
      child = undefined;
      cleanupDir();
    },
    async restart() {
      await stopChild(child);
      child = await spawnRedis(bin, port, dir, persistence, extras, tlsPort);
    },
    kill() {
      child?.kill('SIGKILL');
      child = undefined;
    },
  };
  return server;
}

function spawnRedis(
  bin: string,
  port: number,
  dir: string,
  persistence: Persistence,
  extras: LocalExtras,
  tlsPort?: number,
): Promise<ChildProcess> {
  const { requirepass, tls } = extras;
  const args = [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--dir',
    dir,
    ...persistenceArgs(persistence),
    '--daemonize',
    'no',
    '--loglevel',
    'warning',
    ...(requirepass ? ['--requirepass', requirepass] : []),
    ...(tls && tlsPort !== undefined
      ? [
          '--tls-port',
          String(tlsPort),
          '--tls-cert-file',
          tls.certFile,
          '--tls-key-file',
          tls.keyFile,
          '--tls-ca-cert-file',
          tls.caFile,
          '--tls-auth-clients',
          tls.authClients ? 'yes' : 'no',
        ]
      : []),
  ];
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const collect = (chunk: Buffer): void => {
    if (output.length < 4000) output += chunk.toString('utf8');
  };
  child.stdout?.on('data', collect);
  child.stderr?.on('data', collect);
  // Never outlive the test process, even when a test forgets afterAll.
  const onExit = (): void => {
    child.kill('SIGKILL');
  };
  process.once('exit', onExit);
  child.once('exit', () => process.removeListener('exit', onExit));
  return new Promise((resolve, reject) => {
    let settled = false;
    const fail = (err: Error): void => {
      if (settled) return;
      settled = true;
      child.kill('SIGKILL');
      reject(err);
    };
    child.once('error', (err) => fail(new Error(`cannot start ${bin}: ${err.message}`)));
    child.once('exit', (code) =>
      fail(
        new Error(
          `redis-server on port ${port} exited with code ${code} before it was ready: ${output.trim()}`,
        ),
      ),
    );
    const deadline = Date.now() + READY_TIMEOUT_MS;
    const poll = async (): Promise<void> => {
      while (!settled && Date.now() < deadline) {
        if (await pingOnce(port)) {
          settled = true;
          resolve(child);
          return;
        }
        await new Promise((r) => setTimeout(r, 50));
      }
      fail(new Error(`redis-server on port ${port} did not answer PING within ${READY_TIMEOUT_MS} ms`));
    };
    void poll();
  });
}

async function stopChild(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
  await exited;
  clearTimeout(timer);
}

/** A raw RESP PING so this helper does not depend on the client library under test. */
function pingOnce(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = new Socket();
    let data = '';
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.once('error', () => done(false));
    socket.on('data', (chunk) => {
      data += chunk.toString('utf8');
      // -NOAUTH from a password-protected server also means it is up.
      if (data.includes('\r\n')) done(data.startsWith('+PONG') || data.startsWith('-NOAUTH'));
    });
    socket.connect(port, '127.0.0.1', () => socket.write('PING\r\n'));
  });
}

/** A free TCP port on 127.0.0.1 (free when asked; the caller binds it soon after). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const address = srv.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/** Pinned by digest like the Dockerfile's base images (scripts/refresh-base-images.sh). */
const REDIS_IMAGE = 'redis:7@sha256:595cc6f2bb3af6e03347b90deb6123c6aa2c81dea05ce08128de8a174b6ac67b';

async function startContainer(persistence: Persistence): Promise<RedisServer> {
  const { GenericContainer } = await import('testcontainers');
  // testcontainers takes `name@digest` (the tag is documentation only).
  const container = await new GenericContainer(REDIS_IMAGE.replace(/:[^:@/]+@/, '@'))
    .withCommand(['redis-server', ...persistenceArgs(persistence)])
    .withExposedPorts(6379)
    .start();
  const port = container.getMappedPort(6379);
  let stopped = false;
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    async stop() {
      if (stopped) return;
      stopped = true;
      await container.stop();
    },
    async restart() {
      await container.restart();
      if (container.getMappedPort(6379) !== port) {
        throw new Error(`redis container came back on port ${container.getMappedPort(6379)}, not ${port}`);
      }
    },
    kill() {
      void container.stop({ timeout: 0 });
    },
  };
}
