// A Sentinel setup for tests, as real processes on loopback: one primary and one replica
// (redis-server, REPLICAOF) and three sentinels (`redis-server <conf> --sentinel`, quorum 2,
// down-after 1 s, failover-timeout 5 s), each on a free port, in one temp dir.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ConnectionOptions } from 'node:tls';
import { Redis } from 'ioredis';
import { freePort } from './redis.js';

export const MASTER_NAME = 'feedsync-test';
export const DOWN_AFTER_MS = 1_000;
export const FAILOVER_TIMEOUT_MS = 5_000;

export interface SentinelSet {
  /** redis+sentinel://[:password@]127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/feedsync-test */
  url: string;
  primaryPort: number;
  replicaPort: number;
  /** SIGKILL the current primary (the one the sentinels name). Returns its port. */
  killPrimary(): Promise<number>;
  /** The port of the primary the sentinels name now. */
  primaryNow(): Promise<number>;
  /**
   * Starts a killed node again on its port with its data and its first arguments: an old primary
   * comes back as a lone primary until the sentinels turn it into a replica of the new one.
   */
  restart(port: number): Promise<void>;
  /** ROLE of the node on `port`: 'master' or 'slave' ('unknown' when it does not answer). */
  roleOf(port: number): Promise<string>;
  stop(): Promise<void>;
}

const BIN = '/usr/bin/redis-server';

/** A short-lived client of one node or sentinel of the set being started: no retries, TLS as the set. */
function probeClient(port: number, password?: string): Redis {
  const client = new Redis({
    port,
    host: '127.0.0.1',
    ...(tlsOptions && { tls: tlsOptions }),
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    ...(password && { password }),
  });
  client.on('error', () => undefined);
  return client;
}
// The client TLS options of the set being started (one set at a time per test file).
let tlsOptions: ConnectionOptions | undefined;

/**
 * password: the primary and replica require it (requirepass, masterauth). sentinelPassword: the
 * sentinels require it too (requirepass, and sentinel-pass to reach each other).
 */
export async function startSentinelSet(
  opts: {
    password?: string;
    sentinelPassword?: string;
    /** TLS only, on every node and sentinel (replication and sentinel links too); no client certificates asked. */
    tls?: { certFile: string; keyFile: string; caFile: string };
  } = {},
): Promise<SentinelSet> {
  const pw = opts.password;
  const spw = opts.sentinelPassword;
  const tls = opts.tls;
  tlsOptions = tls && { ca: readFileSync(tls.caFile), servername: '127.0.0.1' };
  const tlsFiles = tls
    ? ['tls-cert-file', tls.certFile, 'tls-key-file', tls.keyFile, 'tls-ca-cert-file', tls.caFile]
    : [];
  const listen = (port: number): string[] =>
    tls
      ? [
          '--port',
          '0',
          '--tls-port',
          String(port),
          '--tls-replication',
          'yes',
          '--tls-auth-clients',
          'no',
          ...tlsFiles.map((x, i) => (i % 2 === 0 ? `--${x}` : x)),
        ]
      : ['--port', String(port)];
  const dir = mkdtempSync(join(tmpdir(), 'feedsync-sentinel-'));
  const children = new Map<number, ChildProcess>();
  const launched = new Map<number, string[]>();
  const launch = async (port: number, args: string[], auth?: string): Promise<void> => {
    launched.set(port, args);
    const child = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    const onExit = (): void => void child.kill('SIGKILL');
    process.once('exit', onExit);
    child.once('exit', () => process.removeListener('exit', onExit));
    children.set(port, child);
    await waitPing(port, auth);
  };
  const node = (port: number): string[] => {
    const sub = join(dir, String(port));
    mkdtempSafe(sub);
    // An hourly snapshot point: `poll`'s persistence check is content, nothing is written meanwhile.
    return [
      ...listen(port),
      ...['--bind', '127.0.0.1', '--dir', sub, '--save', '3600 1', '--appendonly', 'no'],
      ...(pw ? ['--requirepass', pw, '--masterauth', pw] : []),
    ];
  };
  const primaryPort = await freePort();
  const replicaPort = await freePort();
  await launch(primaryPort, node(primaryPort), pw);
  await launch(replicaPort, [...node(replicaPort), '--replicaof', '127.0.0.1', String(primaryPort)], pw);
  await waitOnline(primaryPort, pw);
  const sentinelPorts: number[] = [];
  for (let i = 0; i < 3; i++) {
    const port = await freePort();
    const conf = join(dir, `sentinel-${port}.conf`);
    writeFileSync(
      conf,
      [
        ...(tls
          ? [
              'port 0',
              `tls-port ${port}`,
              'tls-replication yes',
              'tls-auth-clients no',
              ...[0, 2, 4].map((i) => `${tlsFiles[i]} ${tlsFiles[i + 1]}`),
            ]
          : [`port ${port}`]),
        'bind 127.0.0.1',
        `dir ${dir}`,
        `sentinel monitor ${MASTER_NAME} 127.0.0.1 ${primaryPort} 2`,
        `sentinel down-after-milliseconds ${MASTER_NAME} ${DOWN_AFTER_MS}`,
        `sentinel failover-timeout ${MASTER_NAME} ${FAILOVER_TIMEOUT_MS}`,
        ...(pw ? [`sentinel auth-pass ${MASTER_NAME} ${pw}`] : []),
        ...(spw ? [`requirepass ${spw}`, `sentinel sentinel-pass ${spw}`] : []),
        '',
      ].join('\n'),
    );
    await launch(port, [conf, '--sentinel'], spw);
    sentinelPorts.push(port);
  }
  const askSentinels = async (): Promise<number> => {
    for (const port of sentinelPorts) {
      if (!children.has(port)) continue;
      const client = probeClient(port, spw);
      try {
        await client.connect();
        const reply = (await client.call('SENTINEL', 'get-master-addr-by-name', MASTER_NAME)) as string[];
        return Number(reply[1]);
      } catch {
        // next sentinel
      } finally {
        client.disconnect();
      }
    }
    throw new Error('no sentinel answered');
  };
  // The sentinels must know the replica (and each other) before a failover can happen.
  const deadline = Date.now() + 15_000;
  for (;;) {
    const client = new Redis({
      port: sentinelPorts[0],
      host: '127.0.0.1',
      ...(tlsOptions && { tls: tlsOptions }),
      ...(spw && { password: spw }),
    });
    const replicas = (await client.call('SENTINEL', 'replicas', MASTER_NAME)) as unknown[];
    const sentinels = (await client.call('SENTINEL', 'sentinels', MASTER_NAME)) as unknown[];
    client.disconnect();
    if (replicas.length >= 1 && sentinels.length >= 2) break;
    if (Date.now() > deadline) throw new Error('sentinels never saw the replica and each other');
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url: `${tls ? 'rediss' : 'redis'}+sentinel://${pw ? `:${encodeURIComponent(pw)}@` : ''}${sentinelPorts.map((p) => `127.0.0.1:${p}`).join(',')}/${MASTER_NAME}`,
    primaryPort,
    replicaPort,
    primaryNow: askSentinels,
    async killPrimary() {
      const port = await askSentinels();
      children.get(port)?.kill('SIGKILL');
      children.delete(port);
      return port;
    },
    async restart(port) {
      await launch(port, launched.get(port)!, pw);
    },
    async roleOf(port) {
      // A node being restarted or reconfigured may drop the connection: that is "unknown yet".
      const client = probeClient(port, pw);
      try {
        return String(((await client.role()) as unknown[])[0]);
      } catch {
        return 'unknown';
      } finally {
        client.disconnect();
      }
    },
    async stop() {
      for (const [, child] of children) child.kill('SIGKILL');
      children.clear();
      await new Promise((r) => setTimeout(r, 100));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function mkdtempSafe(path: string): void {
  rmSync(path, { recursive: true, force: true });
  mkdirSync(path);
}

async function waitOnline(primaryPort: number, password?: string): Promise<void> {
  const client = new Redis({
    port: primaryPort,
    host: '127.0.0.1',
    ...(tlsOptions && { tls: tlsOptions }),
    ...(password && { password }),
  });
  try {
    const deadline = Date.now() + 10_000;
    while (!/^slave0:.*state=online/m.test(await client.info('replication'))) {
      if (Date.now() > deadline) throw new Error('replica never came online');
      await new Promise((r) => setTimeout(r, 50));
    }
  } finally {
    client.disconnect();
  }
}

async function waitPing(port: number, password?: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const client = probeClient(port, password);
    try {
      await client.connect();
      if ((await client.ping()) === 'PONG') return;
    } catch {
      // not yet
    } finally {
      client.disconnect();
    }
    if (Date.now() > deadline) throw new Error(`redis-server on ${port} never answered`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
