// A private redis-server that requires a password (test/support/redis.ts starts open ones only).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitFor } from '../../support/harness.js';

export interface AuthRedis {
  port: number;
  /** redis://:PASSWORD@127.0.0.1:PORT */
  url(password: string): string;
  stop(): Promise<void>;
}

export async function startAuthRedis(password: string): Promise<AuthRedis> {
  const dir = mkdtempSync(join(tmpdir(), 'feedsync-redis-auth-'));
  const port = await freePort();
  const child: ChildProcess = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--requirepass', password, '--dir', dir, '--save', ''],
    { stdio: 'ignore' },
  );
  const kill = (): void => void child.kill('SIGKILL');
  process.once('exit', kill);
  const stop = async (): Promise<void> => {
    process.removeListener('exit', kill);
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    // Without AUTH a password-protected server answers PING with -NOAUTH: that still means up.
    await waitFor(() => answers(port), 10_000, `redis-server with requirepass on port ${port}`);
  } catch (err) {
    await stop();
    throw err;
  }
  return { port, url: (pw) => `redis://:${encodeURIComponent(pw)}@127.0.0.1:${port}`, stop };
}

function answers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = new Socket();
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.once('error', () => done(false));
    socket.once('data', (d) => done(/^[+-]/.test(d.toString('utf8'))));
    socket.connect(port, '127.0.0.1', () => socket.write('PING\r\n'));
  });
}

function freePort(): Promise<number> {
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
