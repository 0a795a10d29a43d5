// `feedsync poll` / `work` / `status` as processes over TLS to a real Redis Cluster (3 primaries +
// 3 replicas, TLS only: client port, cluster bus and replication; private CA made by openssl;
// client certificates required; a password): they drain the sandbox through rediss+cluster://
// with queue.redis_tls. A missing CA or a wrong password stops the process at start-up (the
// preflight against the first seed node) with exit 1 and the cause on stderr, not a retry loop.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { readJsonl, waitFor } from '../support/harness.js';
import { startRedisCluster, type RedisClusterSet } from '../support/redis-cluster.js';
import { createPki, type Pki } from '../upstream/support/pki.js';
import { CLIENT_TLS, writeTlsConfig } from './support/tls-config.js';
import type { LogEntry } from '../support/process.js';
import { killAllCli, runCli, spawnCli, startBlockedBy, type CliProcess } from './support/cli.js';

const PASSWORD = 'tls-cluster-pw-6Wq4';
const WRONG = 'wrong-cluster-pw-2Hx7';
const SERVICES = ['scheduling', 'workflow'] as const;

let pki: Pki;
let sandbox: Sandbox;
let cluster: RedisClusterSet;
const procs: CliProcess[] = [];

beforeAll(async () => {
  pki = createPki();
  [sandbox, cluster] = await Promise.all([
    startSandbox({ seed: 44, backlog: 40, rate: 0 }),
    startRedisCluster({
      password: PASSWORD,
      tls: {
        certFile: pki.serverCertFile,
        keyFile: pki.serverKeyFile,
        caFile: pki.caFile,
        authClients: true,
        // createPki's server certificate is for serverAuth only: the nodes' own bus and
        // replication links present the client certificate.
        clientCertFile: pki.clientCertFile,
        clientKeyFile: pki.clientKeyFile,
      },
    }),
  ]);
}, 30_000);

afterAll(async () => {
  await Promise.all(procs.map((p) => p.stop()));
  await killAllCli();
  await Promise.all([sandbox?.close(), cluster?.stop()]);
  pki?.cleanup();
});

const config = (name: string, url: string, redisTls?: Record<string, unknown>): string =>
  writeTlsConfig(sandbox, pki, name, url, redisTls);
const CLIENT = CLIENT_TLS;

const isWarning = (l: LogEntry): boolean => l.level !== undefined && l.level >= 40;

/** The cluster URL as feedsync names it in messages: no password, regex-escaped. */
function redactedUrlPattern(): string {
  return cluster.url.replace(/\/\/[^@]*@/, '//').replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
}

describe('feedsync over TLS to a Redis Cluster (tls-auth-clients yes, TLS cluster bus)', () => {
  it('poll and work drain the sandbox through rediss+cluster:// with a private CA and a client certificate; status reads it', async () => {
    expect(cluster.url).toMatch(/^rediss\+cluster:\/\/:[^@]+@127\.0\.0\.1:\d+(,127\.0\.0\.1:\d+){2}$/);
    const file = config('tlsc', cluster.url, CLIENT);
    const poller = spawnCli(['--config', file, 'poll']);
    const worker = spawnCli(['--config', file, 'work']);
    procs.push(poller, worker);
    const sink = join(pki.dir, 'tlsc.jsonl');
    const expected = SERVICES.flatMap((s) => sandbox.events(s).map((e) => `${s}:${e.id}`)).sort();
    const delivered = (): number => new Set(readJsonl(sink).map((c) => c.key)).size;
    await waitFor(() => delivered() === expected.length, 25_000, 'every change delivered').catch(
      (err: Error) => {
        // What the processes said, for a stall that only shows in CI.
        throw new Error(
          `${err.message}: ${delivered()} of ${expected.length}\npoll:\n${poller.text()}\nwork:\n${worker.text()}`,
        );
      },
    );
    const status = await runCli(['--config', file, 'status', '--json']);
    expect(status.code, status.stderr).toBe(0);
    expect((await poller.stop()).code).toBe(0);
    expect((await worker.stop()).code).toBe(0);
    // Once each: nothing missing, nothing twice.
    expect(
      readJsonl(sink)
        .map((c) => c.key)
        .sort(),
    ).toEqual(expected);
    // No warning or error: the connections without an offline queue are used only once ready
    // (a command before that is refused at once, and BullMQ kept a queue whose first command was
    // refused broken for good: every commit of the source failed).
    for (const p of [poller, worker]) expect(p.logs().filter(isWarning)).toEqual([]);
    for (const p of [poller, worker])
      expect([...p.stdout(), ...p.stderr()].join('\n')).not.toContain(PASSWORD);
    expect(status.stdout + status.stderr).not.toContain(PASSWORD);
  });

  it('stays up without the CA, naming the untrusted certificate, and stops at once on SIGTERM', async () => {
    const text = await startBlockedBy(
      ['--config', config('tlsc-noca', cluster.url), 'work'],
      new RegExp(
        `queue\\.redis_url: TLS with Redis at ${redactedUrlPattern()}/? failed: ` +
          "TLS: the server's certificate is not trusted: set queue\\.redis_tls\\.ca_file",
      ),
    );
    expect(text).not.toContain(PASSWORD);
  });

  it('stays up on a wrong password over TLS, naming the rejected credentials and never the password', async () => {
    const wrong = cluster.url.replace(`:${PASSWORD}@`, `:${WRONG}@`);
    expect(wrong).not.toBe(cluster.url);
    const text = await startBlockedBy(
      ['--config', config('tlsc-wrongpw', wrong, CLIENT), 'poll'],
      new RegExp(
        `queue\\.redis_url: Redis at ${redactedUrlPattern()}/? rejected the credentials \\(WRONGPASS`,
      ),
    );
    expect(text).not.toContain(WRONG);
    expect(text).not.toContain(PASSWORD);
  });
});
