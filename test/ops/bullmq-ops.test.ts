// status, cursor and dlq with the BullMQ driver: a real redis-server, a `feedsync poll` child
// (nobody delivering, so changes pile up and the sources fall behind), then a `feedsync run` child
// with a sink that dead-letters some changes. Scaled mode keeps cursors and poll status in Redis:
// no store file is ever written.
import { Redis } from 'ioredis';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { rawConfig, readJsonl, tempDir, waitFor } from '../support/harness.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { killAllCli, runCli, spawnCli, writeConfig, type CliProcess } from './support/cli.js';
import { exerciseDlq, linesOf } from './support/dlq-flow.js';

const BACKLOG = 1500; // far more than the sinks' max_backlog: both are parked long before the end
const EVERY = 7;
const SERVICES = ['scheduling', 'workflow'] as const;

interface StatusJson {
  sources: {
    source: string;
    cursor: number | null;
    state: string;
    last_successful_poll_at: string | null;
    polled_by: string | null;
  }[];
  sinks: { sink: string; queued: number; in_flight: number; delayed: number; dead: number }[];
  positions: {
    source: string;
    sink: string;
    state: string;
    position: number | null;
    lag_events: number | null;
    lag_seconds: number | null;
    queued: number;
    reason: string | null;
    since: string | null;
    pending_ids: number;
    lost_upstream: unknown;
  }[];
}

const dir = tempDir('feedsync-ops-bullmq-');
const flag = join(dir, 'refuse');
let sandbox: Sandbox;
let redis: RedisServer;
const procs: CliProcess[] = [];

function config(name: string, extra: { queue: Record<string, unknown>; startFrom?: Record<string, number> }) {
  const raw = rawConfig(sandbox, dir, {
    queue: { driver: 'bullmq', redis_url: redis.url, prefix: name, ...extra.queue },
    sinks: [
      { name: 'file', type: 'jsonl', path: join(dir, `${name}.jsonl`) },
      {
        name: 'picky',
        type: 'module',
        module: resolve(import.meta.dirname, 'support/refusing-sink.mjs'),
        options: { path: join(dir, `${name}-picky.txt`), refuse_flag: flag, every: EVERY },
      },
    ],
  });
  raw.store = { path: join(dir, `${name}.db`) };
  raw.log = { level: 'info' };
  if (extra.startFrom)
    for (const s of raw.sources as Record<string, unknown>[])
      s.start_from = extra.startFrom[s.name as string];
  const file = writeConfig(dir, raw, `${name}.yaml`);
  return { file, cli: (...args: string[]) => runCli(['--config', file, ...args]) };
}

beforeAll(async () => {
  [sandbox, redis] = await Promise.all([startSandbox({ seed: 12, backlog: BACKLOG, rate: 0 }), startRedis()]);
});

afterAll(async () => {
  await Promise.all(procs.map((p) => p.stop()));
  await killAllCli();
  await sandbox?.close();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('feedsync poll (bullmq, no workers)', () => {
  let a: ReturnType<typeof config>;
  let poller: CliProcess;
  beforeAll(() => {
    a = config('opsA', { queue: { max_backlog: 10 } });
    poller = spawnCli(['--config', a.file, 'poll']);
    procs.push(poller);
  });

  it('status --json: sources polled past their sinks, which are parked with their changes queued', async () => {
    // Watch Redis directly (cheap) until both sinks are parked on both sources (max_backlog 10,
    // nobody delivering), then ask the CLI once. The sources may have caught up by then: a
    // backlog is committed several pages at a time.
    const client = new Redis(redis.url);
    try {
      await waitFor(
        async () => {
          const parked = await Promise.all(SERVICES.map((s) => client.hlen(`{opsA}:lagging:${s}`)));
          return parked.every((n) => n === 2);
        },
        30_000,
        'both sinks parked on both sources',
      );
    } finally {
      client.disconnect();
    }
    expect(existsSync(join(dir, 'opsA.db')), 'poll wrote no store file').toBe(false);
    const r = await a.cli('status', '--json');
    expect(r.code, r.stderr).toBe(0);
    const status = JSON.parse(r.stdout) as StatusJson;
    // A full sink no longer holds its source back: the poll goes on past the parked sinks.
    for (const s of status.sources) expect(['behind', 'caught up']).toContain(s.state);
    expect(status.sources.map((s) => s.polled_by)).toEqual(SERVICES.map(() => `${hostname()}:${poller.pid}`));
    for (const s of status.sources) {
      const ids = sandbox.events(s.source as 'scheduling').map((e) => e.id);
      expect(s.cursor).toBeGreaterThanOrEqual(Math.min(...ids) + 40);
    }
    const file = status.sinks.find((s) => s.sink === 'file')!;
    const picky = status.sinks.find((s) => s.sink === 'picky')!;
    // queued counts CHANGES, as with the local queue: what was queued before each sink was parked,
    // at least its bound and at most what both sources committed up to their positions.
    expect(file.queued).toBeGreaterThanOrEqual(10);
    expect(file).toMatchObject({ in_flight: 0, delayed: 0, dead: 0 });
    expect(picky).toEqual({ ...file, sink: 'picky' });

    // Per sink and source: parked, at a position behind the source's cursor, with the ids passed.
    expect(status.positions.map((p) => [p.source, p.sink, p.state, p.reason])).toEqual(
      SERVICES.flatMap((s) => [
        [s, 'file', 'parked', 'parked'],
        [s, 'picky', 'parked', 'parked'],
      ]),
    );
    for (const p of status.positions) {
      const cursor = status.sources.find((s) => s.source === p.source)!.cursor!;
      expect(p.position).toBeLessThan(cursor);
      expect(p.queued).toBe(file.queued);
      expect(p.lag_events).toBe(cursor - p.position! + p.queued);
      expect(p.lag_seconds).toBeGreaterThanOrEqual(0);
      expect(Date.parse(p.since!)).toBeLessThanOrEqual(Date.now());
      expect(p.pending_ids).toBeGreaterThan(0);
      expect(p.lost_upstream).toBeNull();
    }

    const text = await a.cli('status');
    expect(text.stdout).toMatch(/^scheduling\s+\d+\s+(behind|caught up)/m);
    expect(text.stdout).toMatch(/^picky\s+workflow\s+parked\s+\d+\s+\d+ events, \d+/m);
    expect(text.stdout).toContain(`scheduling: polled by ${hostname()}:${poller.pid}`);
    expect(text.stdout).toMatch(new RegExp(`^file\\s+${file.queued}\\s+0\\s+0\\s+0\\s+0$`, 'm'));
  });

  it('cursor set / reset refuse with exit 1 naming the holder while the poller holds the Redis lease', async () => {
    const [set, reset, unknown] = await Promise.all([
      a.cli('cursor', 'set', 'scheduling', '3'),
      a.cli('cursor', 'reset', 'workflow', '--to', 'latest'),
      a.cli('cursor', 'set', 'nosuch', '3'),
    ]);
    for (const r of [set, reset]) {
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`${hostname()}:${poller.pid}`);
    }
    expect(unknown.code).toBe(2);
  });

  it('once the poller stopped, cursor set and reset work', async () => {
    expect((await poller.stop()).code).toBe(0);
    const set = await a.cli('cursor', 'set', 'scheduling', '3');
    expect(set.code, set.stderr).toBe(0);
    const latest = await a.cli('cursor', 'reset', 'workflow', '--to', 'latest');
    expect(latest.code, latest.stderr).toBe(0);
    const show = await a.cli('cursor', 'show');
    const newest = Math.max(...sandbox.events('workflow').map((e) => e.id));
    expect(show.stdout).toMatch(/^scheduling\t3$/m);
    expect(show.stdout).toMatch(new RegExp(`^workflow\\t${newest}$`, 'm'));
  });
});

describe('feedsync run (bullmq) with a sink that dead-letters', () => {
  it('dlq list / drop / retry work on the per-change dead queues and retried changes are delivered', async () => {
    writeFileSync(flag, '');
    // Start near the end of each feed so the run stays short.
    const startFrom = Object.fromEntries(
      SERVICES.map((s) => [s, Math.max(...sandbox.events(s).map((e) => e.id)) - 60]),
    );
    const b = config('opsB', { queue: { attempts: 3, backoff_ms: 20, max_backoff_ms: 100 }, startFrom });
    const expected = SERVICES.flatMap((s) =>
      sandbox
        .events(s)
        .filter((e) => e.id > startFrom[s]!)
        .map((e) => `${s}:${e.id}`),
    );
    const refused = expected.filter((k) => Number(k.split(':')[1]) % EVERY === 0);
    const run = spawnCli(['--config', b.file, 'run']);
    procs.push(run);
    const pickyPath = join(dir, 'opsB-picky.txt');
    await waitFor(
      () =>
        readJsonl(join(dir, 'opsB.jsonl')).length >= expected.length &&
        linesOf(pickyPath).length >= expected.length - refused.length,
      30_000,
      'the run child to deliver every change',
    );
    const status = JSON.parse((await b.cli('status', '--json')).stdout) as StatusJson;
    expect(status.sinks.find((s) => s.sink === 'picky')!.dead).toBe(refused.length);
    await exerciseDlq({ cli: b.cli, refused, pickyPath, flag });
    expect((await run.stop()).code).toBe(0);
  });
});
