// `feedsync poll` / `work` through Sentinel over TLS (rediss+sentinel://): a primary, a replica and
// three sentinels that all listen on TLS only (replication and the sentinels' links too), a
// private CA made by openssl given as queue.redis_tls.ca_file. They drain the sandbox; the primary
// is killed and the sentinels promote the replica, reached over TLS as well; live events go on
// arriving. Without the CA, the process stays up and not ready, naming the untrusted certificate (checked against the
// first sentinel: the primary is known only through them).
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { readJsonl, waitFor } from '../support/harness.js';
import { startSentinelSet, type SentinelSet } from '../support/redis-sentinel.js';
import { createPki, type Pki } from '../upstream/support/pki.js';
import { writeTlsConfig } from './support/tls-config.js';
import type { LogEntry } from '../support/process.js';
import {
  killAllCli,
  metricsPortOf,
  runCli,
  spawnCli,
  startBlockedBy,
  type CliProcess,
} from './support/cli.js';

const PASSWORD = 'tls-sentinel-pw-8Kd1';
const SERVICES = ['scheduling', 'workflow'] as const;

let pki: Pki;
let sandbox: Sandbox;
let set: SentinelSet;
const procs: CliProcess[] = [];

beforeAll(async () => {
  pki = createPki();
  [sandbox, set] = await Promise.all([
    startSandbox({ seed: 45, backlog: 40, rate: 0 }),
    startSentinelSet({
      password: PASSWORD,
      tls: { certFile: pki.serverCertFile, keyFile: pki.serverKeyFile, caFile: pki.caFile },
    }),
  ]);
}, 30_000);

afterAll(async () => {
  await Promise.all(procs.map((p) => p.stop()));
  await killAllCli();
  await Promise.all([sandbox?.close(), set?.stop()]);
  pki?.cleanup();
});

const config = (name: string, redisTls?: Record<string, unknown>): string =>
  writeTlsConfig(sandbox, pki, name, set.url, redisTls);

const isWarning = (l: LogEntry): boolean => l.level !== undefined && l.level >= 40;
const keys = () => SERVICES.flatMap((s) => sandbox.events(s).map((e) => `${s}:${e.id}`));

describe('feedsync through Sentinel over TLS (rediss+sentinel://)', () => {
  it('drains the sandbox, follows a failover to the promoted replica over TLS, loses nothing', async () => {
    expect(set.url).toMatch(/^rediss\+sentinel:\/\//);
    const file = config('tlss', { ca_file: 'ca.pem' });
    const poller = spawnCli(['--config', file, 'poll']);
    const worker = spawnCli(['--config', file, 'work']);
    procs.push(poller, worker);
    const sink = join(pki.dir, 'tlss.jsonl');
    const delivered = () => new Set(readJsonl(sink).map((c) => c.key));
    const all = () => keys().every((k) => delivered().has(k));
    await waitFor(all, 25_000, 'every change delivered over TLS through Sentinel');
    for (const p of [poller, worker]) expect(p.logs().filter(isWarning), 'before the failover').toEqual([]);
    const killed = await set.killPrimary();
    await waitFor(async () => (await set.primaryNow().catch(() => killed)) !== killed, 30_000, 'failover');
    sandbox.generate('scheduling', 5);
    sandbox.generate('workflow', 5);
    await waitFor(all, 45_000, 'the live events after the failover, over TLS to the new primary').catch(
      async (err: Error) => {
        // What each process says of itself: /readyz names the failing connection and command.
        const ready = await Promise.all(
          [poller, worker].map(async (p) => {
            const port = await metricsPortOf(p);
            const res = await fetch(`http://127.0.0.1:${port}/readyz`).catch((e: Error) => e);
            const metrics = await fetch(`http://127.0.0.1:${port}/metrics`).then(
              (r) => r.text(),
              () => '',
            );
            const errors = metrics.split('\n').filter((l) => l.startsWith('feedsync_redis_errors_total'));
            return `${p.pid}: ${res instanceof Error ? res.message : `${res.status} ${await res.text()}`}\n${errors.join('\n')}`;
          }),
        );
        throw new Error(
          `${err.message}\n${ready.join('\n')}\npoll:\n${poller.text()}\nwork:\n${worker.text()}`,
        );
      },
    );
    expect(readJsonl(sink).length, 'each change once').toBe(keys().length);
    expect((await runCli(['--config', file, 'status', '--json'])).code).toBe(0);
    expect((await poller.stop()).code).toBe(0);
    expect((await worker.stop()).code).toBe(0);
    for (const p of [poller, worker]) {
      expect([...p.stdout(), ...p.stderr()].join('\n')).not.toContain(PASSWORD);
      // The kill shows as failed commands and connection errors until the sentinels name the new
      // primary; none of them about TLS or credentials.
      expect(p.logs().filter((l) => ['tls', 'wrongpass', 'noperm'].includes(String(l.kind)))).toEqual([]);
    }
  });

  it('without the CA, it stays up naming the untrusted certificate of the first sentinel', async () => {
    const text = await startBlockedBy(
      ['--config', config('tlss-noca'), 'work'],
      /TLS with Redis at rediss\+sentinel:\/\/127\.0\.0\.1:\d+,.*failed: TLS: the server's certificate is not trusted: set queue\.redis_tls\.ca_file/,
    );
    expect(text).not.toContain(PASSWORD);
  });
});
