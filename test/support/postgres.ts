// A real PostgreSQL for integration tests: a private cluster (initdb into a temp dir, pg_ctl start on
// a random loopback port, its socket in the same dir), Debian's `postgresql` server binaries. initdb
// and the server refuse to run as root: as root, the cluster is owned by and run as `postgres`.
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface PostgresServer {
  /** postgres://postgres:<password>@127.0.0.1:PORT/postgres (the superuser). */
  url: string;
  port: number;
  password: string;
  /** A URL for another role and/or database on this server. */
  urlFor(user: string, password: string, database?: string): string;
  /** Runs SQL as the superuser through psql (a separate client from the one under test). */
  psql(sql: string, database?: string): string;
  /** pg_ctl restart -m fast: every connection is closed, data kept. */
  restart(): Promise<void>;
  /** pg_ctl stop -m fast; the data directory is removed. Idempotent. */
  stop(): void;
  /** With `tls`: the CA that signed the server's certificate (PEM file). */
  caFile?: string;
}

export interface StartPostgresOptions {
  /** Serve TLS too (a private CA and a server certificate for 127.0.0.1 / localhost, made with openssl). */
  tls?: boolean;
}

const PASSWORD = 'pg-test-Secret-42';

/** initdb / pg_ctl / psql: Debian's versioned directory first (newest), else PATH. */
export function postgresBinary(name: string): string | undefined {
  const root = '/usr/lib/postgresql';
  if (existsSync(root)) {
    const versions = readdirSync(root)
      .filter((v) => /^\d+$/.test(v))
      .sort((a, b) => Number(b) - Number(a));
    for (const v of versions) if (existsSync(join(root, v, 'bin', name))) return join(root, v, 'bin', name);
  }
  for (const dir of (process.env.PATH ?? '').split(':'))
    if (dir && existsSync(join(dir, name))) return join(dir, name);
  return undefined;
}

/**
 * A free loopback port BELOW the kernel's ephemeral range. While the server restarts, its clients
 * keep reconnecting; connecting to a closed port inside that range can pick the very same port as
 * the local end and connect to itself (a TCP simultaneous open), which then holds the port and
 * keeps the server from starting again. Outside the range no outgoing connection ever takes it.
 */
async function freePort(): Promise<number> {
  let low = 32768;
  try {
    low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
  } catch {
    // Linux's default range starts at 32768.
  }
  const floor = Math.min(10_000, low - 1000);
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = floor + Math.floor(Math.random() * (low - floor));
    if (await isFree(port)) return port;
  }
  throw new Error(`no free port between ${floor} and ${low}`);
}

function isFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

export async function startPostgres(opts: StartPostgresOptions = {}): Promise<PostgresServer> {
  const initdb = postgresBinary('initdb');
  const pgCtl = postgresBinary('pg_ctl');
  const psqlBin = postgresBinary('psql');
  if (!initdb || !pgCtl || !psqlBin)
    throw new Error(
      'no PostgreSQL server binaries for tests: install postgresql (apt-get install -y postgresql)',
    );
  const asRoot = process.getuid?.() === 0;
  const dir = mkdtempSync(join(tmpdir(), 'feedsync-pg-'));
  const data = join(dir, 'data');
  // As root: everything below runs as postgres, which must own the directory.
  const run = (bin: string, args: string[], env: NodeJS.ProcessEnv = {}): string => {
    const [cmd, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', bin, ...args]] : [bin, args];
    return execFileSync(cmd, argv, {
      encoding: 'utf8',
      env: { ...process.env, ...env, LC_ALL: 'C' },
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 60_000,
    });
  };
  // A restart must not block this process: a connection it opened just before would sit
  // unanswered, and the server's shutdown waits for it (see authentication_timeout below).
  const runAsync = async (bin: string, args: string[]): Promise<void> => {
    const [cmd, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', bin, ...args]] : [bin, args];
    await promisify(execFile)(cmd, argv, { env: { ...process.env, LC_ALL: 'C' }, timeout: 60_000 });
  };
  if (asRoot) execFileSync('chown', ['postgres:postgres', dir]);
  chmodSync(dir, 0o700);
  const pwfile = join(dir, 'pw');
  writeFileSync(pwfile, `${PASSWORD}\n`);
  if (asRoot) execFileSync('chown', ['postgres:postgres', pwfile]);
  run(initdb, [
    '-D',
    data,
    '-U',
    'postgres',
    '--pwfile',
    pwfile,
    '--auth-local=trust',
    '--auth-host=scram-sha-256',
    '-E',
    'UTF8',
    '--locale=C',
    '--no-sync',
  ]);
  let caFile: string | undefined;
  const tlsArgs: string[] = [];
  if (opts.tls) {
    caFile = makeCertificates(dir, asRoot);
    tlsArgs.push(
      `-c ssl=on -c ssl_cert_file=${join(dir, 'server.crt')} -c ssl_key_file=${join(dir, 'server.key')}`,
    );
  }
  let port = 0;
  const options = (): string =>
    [
      `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1`,
      // A throwaway cluster: no fsync (nothing here crashes the server itself).
      '-c fsync=off -c full_page_writes=off -c max_connections=200',
      // A shutdown waits for every connection that has not sent its startup packet, up to this
      // (default 60 s, past pg_ctl's wait): a client stalled mid-connect would fail the restart.
      '-c authentication_timeout=5s',
      ...tlsArgs,
    ].join(' ');
  const log = join(dir, 'server.log');
  const start = (): void => {
    run(pgCtl, ['start', '-D', data, '-l', log, '-w', '-t', '60', '-o', options()]);
  };
  for (let attempt = 0; ; attempt++) {
    port = await freePort();
    try {
      start();
      break;
    } catch (err) {
      if (attempt === 4) {
        rmSync(dir, { recursive: true, force: true });
        throw err;
      }
    }
  }
  let stopped = false;
  const onExit = (): void => {
    if (!stopped) spawnSync(asRoot ? 'runuser' : pgCtl, stopArgs('immediate'));
  };
  const stopArgs = (mode: string): string[] => {
    const args = ['stop', '-D', data, '-m', mode, '-w'];
    return asRoot ? ['-u', 'postgres', '--', pgCtl, ...args] : args;
  };
  // Never outlive the test process.
  process.once('exit', onExit);
  const urlFor = (user: string, password: string, database = 'postgres') =>
    `postgres://${encodeURIComponent(user)}:${encodeURIComponent(password)}@127.0.0.1:${port}/${database}`;
  return {
    url: urlFor('postgres', PASSWORD),
    port,
    password: PASSWORD,
    urlFor,
    caFile,
    psql(sql: string, database = 'postgres'): string {
      return run(psqlBin, [
        '-X',
        '-q',
        '-A',
        '-t',
        '-v',
        'ON_ERROR_STOP=1',
        '-h',
        dir,
        '-p',
        String(port),
        '-U',
        'postgres',
        '-d',
        database,
        '-c',
        sql,
      ]).trim();
    },
    async restart(): Promise<void> {
      try {
        await runAsync(pgCtl, [
          'restart',
          '-D',
          data,
          '-m',
          'fast',
          '-w',
          '-t',
          '30',
          '-l',
          log,
          '-o',
          options(),
        ]);
      } catch (err) {
        const tail = existsSync(log) ? readFileSync(log, 'utf8').split('\n').slice(-30).join('\n') : '';
        throw new Error(`pg_ctl restart failed: ${(err as Error).message}\nserver log:\n${tail}`);
      }
    },
    stop(): void {
      if (stopped) return;
      stopped = true;
      process.removeListener('exit', onExit);
      try {
        run(pgCtl, ['stop', '-D', data, '-m', 'fast', '-w']);
      } catch {
        // Already down.
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A private CA and a server certificate for 127.0.0.1 and localhost; returns the CA's path. */
function makeCertificates(dir: string, asRoot: boolean): string {
  const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  ssl(
    ...['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=feedsync test CA'],
    ...['-keyout', 'ca.key', '-out', 'ca.crt'],
  );
  ssl(
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-subj',
    '/CN=127.0.0.1',
    '-keyout',
    'server.key',
    '-out',
    'server.csr',
  );
  writeFileSync(join(dir, 'san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  ssl(
    ...['x509', '-req', '-in', 'server.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial'],
    ...['-days', '2', '-extfile', 'san.ext', '-out', 'server.crt'],
  );
  chmodSync(join(dir, 'server.key'), 0o600);
  if (asRoot) execFileSync('chown', ['postgres:postgres', join(dir, 'server.key'), join(dir, 'server.crt')]);
  return join(dir, 'ca.crt');
}
