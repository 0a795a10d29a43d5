// No credential ever leaves the process: a `feedsync run` child at debug level with distinctive
// secrets (upstream password, a wrong upstream password, webhook secret, Redis password behind
// --requirepass, then a wrong Redis password), faults injected upstream and a failing webhook.
// Every line of stdout/stderr of every command, /metrics and /readyz are searched for them.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { rawConfig, readJsonl, tempDir, waitFor } from '../support/harness.js';
import { startReceiver, type Receiver } from '../sinks/support/receiver.js';
import { killAllCli, metricsPortOf, runCli, spawnCli, writeConfig } from '../ops/support/cli.js';
import { startRedis, type RedisServer } from '../support/redis.js';

const SECRETS = {
  sandboxPassword: 'SbxPw-q7Lm2x9T',
  wrongPassword: 'WrongPw-c4Rt8zK1',
  webhookSecret: 'HookSec-v9Jd3nB6',
  redisPassword: 'RedisPw-h2Wq5yE0',
  wrongRedisPassword: 'BadRedisPw-p8Xs1uM4',
};

const dir = tempDir('feedsync-obs-secrets-');
let sandbox: Sandbox;
let redis: RedisServer;
let receiver: Receiver;
const collected: { what: string; text: string }[] = [];

function config(redisPassword: string, name: string): string {
  const raw = rawConfig(sandbox, dir, {
    queue: {
      driver: 'bullmq',
      redis_url: `redis://:${encodeURIComponent(redisPassword)}@127.0.0.1:${redis.port}`,
      prefix: name,
      attempts: 50,
    },
    sinks: [
      { name: 'file', type: 'jsonl', path: join(dir, `${name}.jsonl`) },
      { name: 'hook', type: 'webhook', url: receiver.url, secret: SECRETS.webhookSecret, timeout_ms: 2000 },
    ],
  });
  const sources = raw.sources as Record<string, unknown>[];
  sources[1]!.password = SECRETS.wrongPassword; // workflow: wrong credentials, 401 after the challenge
  raw.store = { path: join(dir, `${name}.db`) };
  raw.log = { level: 'debug' };
  return writeConfig(dir, raw, `${name}.yaml`);
}

beforeAll(async () => {
  [sandbox, redis, receiver] = await Promise.all([
    startSandbox({ seed: 41, backlog: 60, rate: 5, password: SECRETS.sandboxPassword }),
    startRedis({ requirepass: SECRETS.redisPassword }),
    startReceiver(SECRETS.webhookSecret),
  ]);
  sandbox.setFaults({
    rate: 0.25,
    kinds: ['status_500', 'status_503', 'status_429_retry_after', 'truncated', 'malformed', 'html_200'],
  });
  receiver.mode = { kind: 'status', status: 500, body: 'receiver down' };
});

afterAll(async () => {
  await killAllCli();
  await Promise.all([sandbox?.close(), redis?.stop(), receiver?.close()]);
  rmSync(dir, { recursive: true, force: true });
});

it('a run with faults, wrong credentials and a failing webhook leaks no secret anywhere', async () => {
  const good = config(SECRETS.redisPassword, 'good');
  const run = spawnCli(['run'], { config: good });
  const port = await metricsPortOf(run);

  await waitFor(() => receiver.requests.length >= 5, 20_000, 'failing webhook deliveries');
  receiver.mode = { kind: 'ok' };
  await waitFor(
    () => receiver.keys.length >= 10 && readJsonl(join(dir, 'good.jsonl')).length >= 60,
    30_000,
    'deliveries after the receiver recovered',
  );
  await run.waitForLine(/authentication failed/, 20_000, 'the 401 of the wrong workflow password');
  await waitFor(() => sandbox.stats().scheduling.faults.malformed > 0, 20_000, 'a malformed body');

  for (const path of ['/metrics', '/readyz', '/healthz']) {
    const res = await fetch(`http://127.0.0.1:${port}${path}`);
    collected.push({ what: path, text: await res.text() });
  }
  const ops = await Promise.all(
    [['status', '--json'], ['dlq', 'list'], ['cursor', 'show'], ['check-config']].map(async (args) => ({
      args,
      r: await runCli(['--config', good, ...args]),
    })),
  );
  for (const { args, r } of ops) {
    expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
    collected.push({ what: args.join(' '), text: r.stdout + r.stderr });
  }
  expect((await run.stop()).code).toBe(0);
  collected.push({ what: 'run', text: run.text() });

  // A wrong Redis password: the daemon stays up and not ready, naming the problem, and `status`
  // fails; neither may show the password it was given.
  const bad = config(SECRETS.wrongRedisPassword, 'bad');
  const badRun = spawnCli(['run'], { config: bad });
  const [badStatus] = await Promise.all([
    runCli(['--config', bad, 'status']),
    badRun.waitForLine(/WRONGPASS/, 15_000, 'the Redis authentication error'),
  ]);
  // The daemon stays up, not ready, retrying (Redis trouble at start-up is a state); SIGTERM ends it.
  expect(await badRun.stop()).toMatchObject({ code: 0 });
  collected.push({ what: 'run with a wrong Redis password', text: badRun.text() });
  expect(badStatus.code).toBe(1);
  collected.push({ what: 'status with a wrong Redis password', text: badStatus.stdout + badStatus.stderr });

  // The searched output really covers the dangerous paths: debug lines, auth failures, retries.
  const all = collected.map((c) => c.text).join('\n');
  expect(all).toMatch(/"level":20/);
  expect(all).toMatch(/authentication failed/);
  expect(all).toMatch(/delivery failed; will retry/);
  expect(all).toMatch(/cannot decode/);
  expect(all).toMatch(/WRONGPASS/);
  expect(all).toContain('<redacted>');

  for (const { what, text } of collected) {
    for (const [name, secret] of Object.entries(SECRETS))
      expect(text.includes(secret), `${name} appears in the output of ${what}`).toBe(false);
    // Digest Authorization headers are credentials too (a replayable response hash).
    expect(text, `an Authorization header appears in the output of ${what}`).not.toMatch(
      /Digest username=|response="[0-9a-f]{32,}"/,
    );
  }
});
