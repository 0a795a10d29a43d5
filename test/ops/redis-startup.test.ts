// Redis trouble at start-up is a state, not a hang (docs/scaled-mode.md, "Redis errors, logs and
// readiness"): `poll` and `work` listen on /healthz and /readyz before anything waits on Redis;
// /readyz answers 503 naming the cause and the key to fix while Redis is unreachable, a sentinel
// sits behind a plain URL, the sentinels want a password nobody gave or know no such master; the
// process starts by itself once Redis answers; SIGTERM exits 0 at once whatever Redis does; and
// nothing but feedsync's own JSON lines reaches stdout or stderr.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { rawConfig, readJsonl, tempDir, waitFor } from '../support/harness.js';
import { freePort } from '../support/redis.js';
import { MASTER_NAME, startSentinelSet, type SentinelSet } from '../support/redis-sentinel.js';
import { killAllCli, spawnCli, writeConfig, type CliProcess } from './support/cli.js';

const SENTINEL_PASSWORD = 'sentinel-pw-Q7c2';
let sandbox: Sandbox;
let sentinels: SentinelSet;
const dir = tempDir('feedsync-redis-startup-');
const children: ChildProcess[] = [];

beforeAll(async () => {
  [sandbox, sentinels] = await Promise.all([
    startSandbox({ seed: 7, backlog: 20, rate: 0 }),
    startSentinelSet({ sentinelPassword: SENTINEL_PASSWORD }),
  ]);
});

afterAll(async () => {
  await killAllCli();
  for (const c of children) c.kill('SIGKILL');
  await Promise.all([sandbox?.close(), sentinels?.stop()]);
});

async function start(name: string, mode: 'poll' | 'work', queue: Record<string, unknown>, shared = name) {
  const port = await freePort();
  const raw = rawConfig(sandbox, dir, {
    queue: { driver: 'bullmq', prefix: shared, ...queue },
    sinks: [{ name: 'file', type: 'jsonl', path: `${dir}/${shared}.jsonl` }],
  });
  raw.http = { host: '127.0.0.1', port };
  raw.log = { level: 'info' };
  const proc = spawnCli(['--config', writeConfig(dir, raw, `${name}.yaml`), mode]);
  return { proc, port };
}

async function readyz(port: number): Promise<{ status: number; reasons: string[] }> {
  const res = await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(3000) });
  const body = (await res.json()) as { reasons?: string[] };
  return { status: res.status, reasons: body.reasons ?? [] };
}

/** /readyz answers 503 with a reason matching `pattern` while /healthz answers 200. */
async function expectUnready(port: number, pattern: RegExp): Promise<string> {
  let last: string[] = [];
  await waitFor(
    async () => {
      const r = await readyz(port).catch(() => undefined);
      last = r?.reasons ?? [];
      return r?.status === 503 && last.some((reason) => pattern.test(reason));
    },
    20_000,
    `/readyz 503 naming ${pattern} (last: ${JSON.stringify(last)})`,
  );
  const health = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(1000) });
  expect(health.status).toBe(200);
  return last.find((reason) => pattern.test(reason))!;
}

async function expectQuickCleanStop(proc: CliProcess): Promise<void> {
  const started = Date.now();
  const exit = await proc.stop();
  expect(exit.code).toBe(0);
  expect(Date.now() - started).toBeLessThan(4_000);
  // Only feedsync's JSON lines: no library writing to the terminal on its own.
  expect(proc.stderr().filter((l) => l.trim() !== '')).toEqual([]);
  for (const line of proc.stdout()) expect(() => JSON.parse(line) as unknown).not.toThrow();
}

describe('poll and work with Redis trouble at start-up', () => {
  it('an unreachable Redis: not ready, naming queue.redis_url; ready and delivering once Redis starts', async () => {
    const redisPort = await freePort();
    const poller = await start('late-poll', 'poll', { redis_url: `redis://127.0.0.1:${redisPort}` }, 'late');
    const worker = await start('late-work', 'work', { redis_url: `redis://127.0.0.1:${redisPort}` }, 'late');
    await expectUnready(poller.port, /queue\.redis_url: cannot reach Redis at redis:\/\/127\.0\.0\.1:\d+/);
    await expectUnready(worker.port, /unreachable|cannot reach Redis/);
    const redis = spawn(
      '/usr/bin/redis-server',
      ['--port', String(redisPort), '--save', '', '--appendonly', 'yes', '--dir', dir],
      {
        stdio: 'ignore',
      },
    );
    children.push(redis);
    await waitFor(
      async () => (await readyz(poller.port).catch(() => undefined))?.status === 200,
      60_000,
      'poll ready once Redis answers',
    );
    await waitFor(
      async () => (await readyz(worker.port).catch(() => undefined))?.status === 200,
      30_000,
      'work ready once Redis answers',
    );
    const expected = (['scheduling', 'workflow'] as const).flatMap((s) =>
      sandbox.events(s).map((e) => `${s}:${e.id}`),
    );
    await waitFor(
      () => new Set(readJsonl(`${dir}/late.jsonl`).map((c) => c.key)).size === expected.length,
      30_000,
      'every change delivered once Redis answered',
    );
    await expectQuickCleanStop(poller.proc);
    await expectQuickCleanStop(worker.proc);
    redis.kill('SIGTERM');
    await once(redis, 'exit');
  });

  it('SIGTERM while Redis is unreachable exits 0 at once, poll and work alike', async () => {
    const redisPort = await freePort();
    for (const mode of ['poll', 'work'] as const) {
      const p = await start(`gone-${mode}`, mode, { redis_url: `redis://127.0.0.1:${redisPort}` });
      await expectUnready(p.port, /queue|redis/i);
      await expectQuickCleanStop(p.proc);
    }
  });

  it('a sentinel behind a plain redis:// URL is named as such', async () => {
    const sentinelPort = /127\.0\.0\.1:(\d+)/.exec(sentinels.url)![1];
    const p = await start('plain-sentinel', 'work', {
      redis_url: `redis://:${SENTINEL_PASSWORD}@127.0.0.1:${sentinelPort}`,
    });
    await expectUnready(
      p.port,
      /queue\.redis_url: redis:\/\/127\.0\.0\.1:\d+ is a Redis Sentinel, not a data node: .*redis\+sentinel:\/\//,
    );
    await expectQuickCleanStop(p.proc);
    expect(p.proc.stdout().join('\n')).not.toContain(SENTINEL_PASSWORD);
  });

  it('sentinels that want a password nobody gave name queue.redis_sentinel_password', async () => {
    const p = await start('no-sentinel-pw', 'poll', { redis_url: sentinels.url });
    await expectUnready(p.port, /queue\.redis_sentinel_password: the sentinels at .* require a password/);
    await expectQuickCleanStop(p.proc);
  });

  it('an unknown master name is named, with the names the sentinels know', async () => {
    const url = sentinels.url.replace(`/${MASTER_NAME}`, '/no-such-master');
    const p = await start('no-master', 'poll', {
      redis_url: url,
      redis_sentinel_password: SENTINEL_PASSWORD,
    });
    const reason = await expectUnready(p.port, /know no master named "no-such-master"/);
    expect(reason).toContain(`"${MASTER_NAME}"`);
    expect(reason).not.toContain(SENTINEL_PASSWORD);
    await expectQuickCleanStop(p.proc);
  });

  it('with the right sentinel password and name it starts', async () => {
    const p = await start('sentinel-ok', 'work', {
      redis_url: sentinels.url,
      redis_sentinel_password: SENTINEL_PASSWORD,
    });
    await waitFor(
      async () => (await readyz(p.port).catch(() => undefined))?.status === 200,
      30_000,
      'ready behind Sentinel',
    );
    await expectQuickCleanStop(p.proc);
  });
});
