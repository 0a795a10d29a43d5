// A real forward proxy on loopback for the proxy tests: Debian's tinyproxy (scripts/ensure-test-deps.sh
// installs it), started with a generated config on a free port. Its log lists every request it
// forwarded ("GET http://…") and every tunnel it opened ("CONNECT host:port"), which is how the
// tests prove their traffic went through it.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface Tinyproxy {
  port: number;
  /** http://127.0.0.1:<port> (no credentials). */
  url: string;
  /** The request lines logged so far ("GET http://…/path HTTP/1.1", "CONNECT 127.0.0.1:443 HTTP/1.1"). */
  requests(): string[];
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

export async function startTinyproxy(
  opts: { basicAuth?: { user: string; password: string } } = {},
): Promise<Tinyproxy> {
  const dir = mkdtempSync(join(tmpdir(), 'feedsync-tinyproxy-'));
  const log = join(dir, 'tinyproxy.log');
  // A port picked then freed may be taken meanwhile: try a few.
  for (let tries = 0; tries < 5; tries++) {
    const port = await freePort();
    const conf = join(dir, 'tinyproxy.conf');
    writeFileSync(
      conf,
      [
        `Port ${port}`,
        'Listen 127.0.0.1',
        'Timeout 30',
        `LogFile "${log}"`,
        'LogLevel Info',
        'MaxClients 50',
        'Allow 127.0.0.1',
        // No ConnectPort line: CONNECT may reach any port (the test servers' are random).
        ...(opts.basicAuth ? [`BasicAuth ${opts.basicAuth.user} ${opts.basicAuth.password}`] : []),
        '',
      ].join('\n'),
    );
    writeFileSync(log, '');
    const child = spawn('tinyproxy', ['-d', '-c', conf], { stdio: 'ignore' });
    let spawnError: Error | undefined;
    const exited = new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.once('error', (err) => {
        spawnError = err;
        resolve();
      });
    });
    if (await listening(log, child)) {
      const read = (): string => readFileSync(log, 'utf8');
      return {
        port,
        url: `http://127.0.0.1:${port}`,
        requests: () => [...read().matchAll(/Request \(file descriptor \d+\): (.*)$/gm)].map((m) => m[1]!),
        stop: async () => {
          child.kill('SIGTERM');
          await exited;
          rmSync(dir, { recursive: true, force: true });
        },
      };
    }
    child.kill('SIGKILL');
    await exited;
    if (spawnError) break;
  }
  rmSync(dir, { recursive: true, force: true });
  throw new Error('tinyproxy did not start (is it installed? scripts/ensure-test-deps.sh)');
}

async function listening(log: string, child: ChildProcess): Promise<boolean> {
  const deadline = Date.now() + 5000;
  while (Date.now() < deadline && child.exitCode === null && child.pid !== undefined) {
    if (readFileSync(log, 'utf8').includes('Accepting connections')) return true;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return false;
}
