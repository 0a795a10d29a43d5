// Scaled mode over TLS (queue.redis_tls) against a real redis-server serving TLS with a private
// CA made by openssl: a `run` drains the sandbox through rediss:// (every connection, BullMQ's
// blocking duplicates included, must speak TLS to that port), and each way TLS or AUTH can be
// refused fails start-up at once with its own cause, never a reconnect loop or "max retries".
import { pino } from 'pino';
import { PipelineEvents } from '../../src/core/events.js';
import { openQueueDriver } from '../../src/queue/drivers.js';
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/core/errors.js';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { validateConfig } from '../../src/config/load.js';
import { rawConfig, readJsonl, startTestDaemon, tempDir, waitFor } from '../support/harness.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { createPki, type Pki } from '../upstream/support/pki.js';

const PASSWORD = 'tls-pw-Q4x9';
const SERVICES = ['scheduling', 'workflow'] as const;

let pki: Pki;
let sandbox: Sandbox;
/** TLS without client certificates, and TLS requiring one (tls-auth-clients yes). */
let tlsRedis: RedisServer;
let mtlsRedis: RedisServer;
const dir = tempDir('feedsync-redis-tls-');

beforeAll(async () => {
  pki = createPki();
  const files = { certFile: pki.serverCertFile, keyFile: pki.serverKeyFile, caFile: pki.caFile };
  [sandbox, tlsRedis, mtlsRedis] = await Promise.all([
    startSandbox({ seed: 31, backlog: 40, rate: 0 }),
    startRedis({ requirepass: PASSWORD, tls: files }),
    startRedis({ requirepass: PASSWORD, tls: { ...files, authClients: true } }),
  ]);
});

afterAll(async () => {
  await Promise.all([sandbox?.close(), tlsRedis?.stop(), mtlsRedis?.stop()]);
  pki?.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

let configs = 0;
/** A raw config on `url` with `redisTls` (PEM paths relative to the PKI dir, the config's dir). */
function raw(url: string, redisTls?: Record<string, unknown>): Record<string, unknown> {
  const name = `tls${++configs}`;
  return rawConfig(sandbox, dir, {
    queue: {
      driver: 'bullmq',
      redis_url: url,
      prefix: name,
      ...(redisTls && { redis_tls: redisTls }),
    },
    sinks: [{ name: 'file', type: 'jsonl', path: `${dir}/${name}.jsonl` }],
  });
}

/** Starts a daemon whose config lives in the PKI dir (so `ca_file: ca.pem` resolves there). */
async function start(config: Record<string, unknown>, mode: 'run' | 'poll' | 'work' = 'poll') {
  return startTestDaemon(config, pki.dir, mode);
}

/**
 * Opening the queue must fail at once: the error, and how long it took. (The daemon around it stays
 * up, not ready, and tries again: test/ops/redis-startup.test.ts.)
 */
async function startupFailure(config: Record<string, unknown>): Promise<{ message: string; ms: number }> {
  const started = Date.now();
  try {
    const valid = validateConfig(config, { dir: pki.dir });
    const driver = await openQueueDriver({
      config: valid,
      mode: 'poll',
      sinks: [],
      events: new PipelineEvents(),
      logger: pino({ level: 'silent' }),
    });
    await driver.close();
  } catch (err) {
    return { message: (err as Error).message, ms: Date.now() - started };
  }
  throw new Error('start-up succeeded');
}

describe('scaled mode over TLS', () => {
  it('runs through rediss:// with a private CA and a client certificate, every connection on TLS', async () => {
    const config = raw(mtlsRedis.tlsUrl!, {
      ca_file: 'ca.pem',
      cert_file: 'client.pem',
      key_file: 'client.key',
    });
    const { daemon } = await start(config, 'run');
    const expected = SERVICES.flatMap((s) => sandbox.events(s).map((e) => `${s}:${e.id}`));
    const file = `${dir}/tls${configs}.jsonl`;
    try {
      await waitFor(
        () => new Set(readJsonl(file).map((c) => c.key)).size === expected.length,
        30_000,
        'every sandbox change delivered over TLS',
      );
    } finally {
      await daemon.stop();
    }
    expect(new Set(readJsonl(file).map((c) => c.key))).toEqual(new Set(expected));
  });

  it('trusts the CA of ca_file alone when the server asks no client certificate', async () => {
    const { daemon } = await start(raw(tlsRedis.tlsUrl!, { ca_file: 'ca.pem' }), 'work');
    await daemon.stop();
  });

  it('refuses an untrusted certificate at start-up, naming it and the key to set', async () => {
    // No redis_tls: the system trust store, which does not know the private CA.
    const { message, ms } = await startupFailure(raw(tlsRedis.tlsUrl!));
    expect(message).toMatch(
      /^queue\.redis_url: TLS with Redis at rediss:\/\/127\.0\.0\.1:\d+\/? failed: TLS: the server's certificate is not trusted: set queue\.redis_tls\.ca_file to the CA that signed it \((SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_VERIFY_LEAF_SIGNATURE)/,
    );
    expect(message).not.toMatch(/max retries/i);
    expect(message).not.toContain(PASSWORD);
    expect(ms).toBeLessThan(5_000);
    // A CA that did not sign the server's certificate: the same refusal.
    const other = await startupFailure(raw(tlsRedis.tlsUrl!, { ca_file: 'other-ca.pem' }));
    expect(other.message).toMatch(/certificate is not trusted/);
  });

  it('refuses a certificate that does not name the host, pointing at servername', async () => {
    const { message } = await startupFailure(
      raw(tlsRedis.tlsUrl!, { ca_file: 'ca.pem', servername: 'redis.example' }),
    );
    expect(message).toMatch(
      /does not name the host of queue\.redis_url.*queue\.redis_tls\.servername \(ERR_TLS_CERT_ALTNAME_INVALID/,
    );
    // The name the certificate does list works.
    const { daemon } = await start(
      raw(tlsRedis.tlsUrl!, { ca_file: 'ca.pem', servername: 'localhost' }),
      'work',
    );
    await daemon.stop();
  });

  it('says the server refused the handshake when it requires a client certificate and none is set', async () => {
    const { message, ms } = await startupFailure(raw(mtlsRedis.tlsUrl!, { ca_file: 'ca.pem' }));
    expect(message).toMatch(
      /TLS: the server refused the handshake: if it requires a client certificate, set queue\.redis_tls\.cert_file and key_file.*certificate required/,
    );
    expect(ms).toBeLessThan(5_000);
  });

  it('refuses a wrong password over TLS at start-up (WRONGPASS), without the password', async () => {
    const wrong = tlsRedis.tlsUrl!.replace(PASSWORD, 'not-the-password');
    const { message, ms } = await startupFailure(raw(wrong, { ca_file: 'ca.pem' }));
    expect(message).toMatch(
      /^queue\.redis_url: Redis at rediss:\/\/127\.0\.0\.1:\d+\/? rejected the credentials \(WRONGPASS/,
    );
    expect(message).not.toContain('not-the-password');
    expect(ms).toBeLessThan(5_000);
    // And no password at all where one is required.
    const none = tlsRedis.tlsUrl!.replace(`:${PASSWORD}@`, '');
    expect((await startupFailure(raw(none, { ca_file: 'ca.pem' }))).message).toMatch(
      /requires a password \(NOAUTH/,
    );
  });

  it('encrypts without verifying with reject_unauthorized: false', async () => {
    const { daemon } = await start(raw(tlsRedis.tlsUrl!, { reject_unauthorized: false }), 'work');
    await daemon.stop();
  });
});

describe('queue.redis_tls configuration', () => {
  const base = (): Record<string, unknown> => raw('rediss://127.0.0.1:1');
  const withTls = (tls: Record<string, unknown>, url = 'rediss://127.0.0.1:1') => {
    const config = base();
    config.queue = { ...(config.queue as object), redis_url: url, redis_tls: tls };
    return config;
  };

  it('resolves the PEM paths against the config directory and defaults reject_unauthorized to true', () => {
    const config = validateConfig(withTls({ ca_file: 'ca.pem' }), { dir: pki.dir });
    expect(config.queue.redis_tls).toEqual({ ca_file: pki.caFile, reject_unauthorized: true });
  });

  it('refuses TLS settings with a redis:// URL, a certificate without its key, and unreadable files', () => {
    expect(() =>
      validateConfig(withTls({ ca_file: 'ca.pem' }, 'redis://127.0.0.1:1'), { dir: pki.dir }),
    ).toThrow(
      /queue\.redis_tls: needs a rediss:\/\/, rediss\+sentinel:\/\/ or rediss\+cluster:\/\/ queue\.redis_url/,
    );
    expect(() => validateConfig(withTls({ cert_file: 'client.pem' }), { dir: pki.dir })).toThrow(
      /queue\.redis_tls\.key_file: cert_file and key_file go together/,
    );
    expect(() => validateConfig(withTls({ ca_file: 'missing.pem' }), { dir: pki.dir })).toThrow(
      /queue\.redis_tls\.ca_file: cannot read .*missing\.pem \(ENOENT\)/,
    );
    expect(() => validateConfig(withTls({ verify: true }), { dir: pki.dir })).toThrow(
      /queue\.redis_tls\.verify: unknown key/,
    );
  });

  it('refuses a ca_file without a certificate when the driver starts, naming the key', async () => {
    let err: unknown;
    try {
      await start(withTls({ ca_file: 'client.key' }, tlsRedis.tlsUrl!));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(
      /^queue\.redis_tls\.ca_file: .*client\.key holds no PEM certificate/,
    );
  });
});
