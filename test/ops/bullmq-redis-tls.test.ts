// `feedsync poll` / `work` / `status` as processes over TLS to a real redis-server (private CA made
// by openssl, client certificates required): they drain the sandbox; a missing CA or a wrong
// password keeps the process up and not ready, naming the cause in its log and /readyz; SIGTERM stops it at once.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { readJsonl, waitFor } from '../support/harness.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { createPki, type Pki } from '../upstream/support/pki.js';
import { CLIENT_TLS, writeTlsConfig } from './support/tls-config.js';
import { killAllCli, runCli, spawnCli, startBlockedBy, type CliProcess } from './support/cli.js';

const PASSWORD = 'tls-cli-pw-3Zr8';
const SERVICES = ['scheduling', 'workflow'] as const;

let pki: Pki;
let sandbox: Sandbox;
let redis: RedisServer;
const procs: CliProcess[] = [];

beforeAll(async () => {
  pki = createPki();
  [sandbox, redis] = await Promise.all([
    startSandbox({ seed: 43, backlog: 40, rate: 0 }),
    startRedis({
      requirepass: PASSWORD,
      tls: {
        certFile: pki.serverCertFile,
        keyFile: pki.serverKeyFile,
        caFile: pki.caFile,
        authClients: true,
      },
    }),
  ]);
});

afterAll(async () => {
  await Promise.all(procs.map((p) => p.stop()));
  await killAllCli();
  await Promise.all([sandbox?.close(), redis?.stop()]);
  pki?.cleanup();
});

const config = (name: string, url: string, redisTls?: Record<string, unknown>): string =>
  writeTlsConfig(sandbox, pki, name, url, redisTls);
const CLIENT = CLIENT_TLS;

describe('feedsync over TLS (tls-auth-clients yes)', () => {
  it('poll and work drain the sandbox through rediss:// with a private CA and a client certificate; status reads it', async () => {
    const file = config('tlsok', redis.tlsUrl!, CLIENT);
    const poller = spawnCli(['--config', file, 'poll']);
    const worker = spawnCli(['--config', file, 'work']);
    procs.push(poller, worker);
    const expected = SERVICES.flatMap((s) => sandbox.events(s).map((e) => `${s}:${e.id}`));
    await waitFor(
      () => new Set(readJsonl(join(pki.dir, 'tlsok.jsonl')).map((c) => c.key)).size === expected.length,
      30_000,
      'every change delivered over TLS',
    );
    const status = await runCli(['--config', file, 'status', '--json']);
    expect(status.code, status.stderr).toBe(0);
    expect((await poller.stop()).code).toBe(0);
    expect((await worker.stop()).code).toBe(0);
    for (const p of [poller, worker])
      expect(p.logs().filter((l) => l.level !== undefined && l.level >= 40)).toEqual([]);
  });

  it('stays up without the CA, naming the untrusted certificate, and stops at once on SIGTERM', async () => {
    await startBlockedBy(
      ['--config', config('noca', redis.tlsUrl!), 'work'],
      /queue\.redis_url: TLS with Redis at rediss:\/\/127\.0\.0\.1:\d+\/? failed: TLS: the server's certificate is not trusted: set queue\.redis_tls\.ca_file/,
    );
  });

  it('stays up when the server requires a client certificate and none is configured, naming the keys', async () => {
    await startBlockedBy(
      ['--config', config('nocert', redis.tlsUrl!, { ca_file: 'ca.pem' }), 'poll'],
      /the server refused the handshake: if it requires a client certificate, set queue\.redis_tls\.cert_file and key_file/,
    );
  });

  it('stays up on a wrong password over TLS, naming WRONGPASS and never the password', async () => {
    const wrong = redis.tlsUrl!.replace(PASSWORD, 'wrong-pw-9Kd1');
    const text = await startBlockedBy(
      ['--config', config('wrongpw', wrong, CLIENT), 'poll'],
      /queue\.redis_url: Redis at rediss:\/\/127\.0\.0\.1:\d+\/? rejected the credentials \(WRONGPASS/,
    );
    expect(text).not.toContain('wrong-pw-9Kd1');
  });
});
