// The admin API in scaled mode, from real `feedsync poll` and `feedsync work` children on a real
// redis-server: either replica answers with the same readings (the poller from its own driver, the
// worker from the ops parts it opens), a cursor move through either is refused naming the poller,
// and a retry through the poller is delivered by the worker.
import { rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { linesOf } from '../ops/support/dlq-flow.js';
import { rawConfig, tempDir, waitFor } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig, type CliProcess } from '../support/process.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { call } from './support.js';

const BACKLOG = 40;
const EVERY = 7;
const TOKEN = 'scaled-admin-token-71c2';
const dir = tempDir('feedsync-admin-scaled-');
const flag = join(dir, 'refuse');
const pickyPath = join(dir, 'picky.txt');
let sandbox: Sandbox;
let redis: RedisServer;
let poller: CliProcess;
let worker: CliProcess;
let poll: { url: string };
let work: { url: string };

const refused = () =>
  (['scheduling', 'workflow'] as const).flatMap((s) =>
    sandbox
      .events(s)
      .filter((e) => e.id % EVERY === 0)
      .map((e) => `${s}:${e.id}`),
  );
const pickyKeys = () => linesOf(pickyPath);

async function adminOf(proc: CliProcess): Promise<{ url: string }> {
  const started = await proc.waitForLog((l) => l.msg === 'feedsync started', 30_000, 'feedsync started');
  return { url: `http://127.0.0.1:${started.admin_port as number}` };
}

beforeAll(async () => {
  [sandbox, redis] = await Promise.all([startSandbox({ seed: 21, backlog: BACKLOG, rate: 0 }), startRedis()]);
  writeFileSync(flag, '');
  writeFileSync(join(dir, 'admin.token'), TOKEN);
  const raw = rawConfig(sandbox, dir, {
    queue: { driver: 'bullmq', redis_url: redis.url, prefix: 'adm', attempts: 2, allow_volatile_redis: true },
    sinks: [
      { name: 'file', type: 'jsonl', path: join(dir, 'changes.jsonl') },
      {
        name: 'picky',
        type: 'module',
        module: resolve(import.meta.dirname, '../ops/support/refusing-sink.mjs'),
        options: { path: pickyPath, refuse_flag: flag, every: EVERY },
      },
    ],
  });
  raw.log = { level: 'info' };
  raw.admin = { enabled: true, host: '127.0.0.1', port: 0, token_file: 'admin.token' };
  const file = writeConfig(dir, raw);
  poller = spawnCli(['--config', file, 'poll']);
  worker = spawnCli(['--config', file, 'work']);
  [poll, work] = await Promise.all([adminOf(poller), adminOf(worker)]);
  await waitFor(
    async () => {
      const sinks = (await call(work, TOKEN, 'GET', '/api/v1/sinks')).body?.sinks as
        { sink: string; dead: number; queued: number; in_flight: number; delayed: number }[] | undefined;
      const idle = sinks?.every((s) => s.queued + s.in_flight + s.delayed === 0);
      return idle === true && sinks?.find((s) => s.sink === 'picky')?.dead === refused().length;
    },
    60_000,
    'every change delivered, the refused ones dead-lettered',
  );
}, 120_000);

afterAll(async () => {
  await Promise.all([poller?.stop(), worker?.stop()]);
  await killAllCli();
  await sandbox?.close();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('the admin API on poll and work replicas', () => {
  it('answers the same from either, the delivery activity only from the worker', async () => {
    // The poller keeps polling (every 100 ms): its poll times move between two readings.
    const steady = (sources: Record<string, unknown>[]) =>
      sources.map(({ source, cursor, state, polled_by, last_event_at }) => ({
        source,
        cursor,
        state,
        polled_by,
        last_event_at,
      }));
    const read = () =>
      Promise.all([call(poll, TOKEN, 'GET', '/api/v1/status'), call(work, TOKEN, 'GET', '/api/v1/status')]);
    let [a, b] = await read();
    // Two requests are two moments: on a loaded machine a reading may fall on either side of a
    // poll's state write. Read again until a pair agrees; a pair that never does fails below.
    for (let i = 0; i < 20; i++) {
      const same =
        JSON.stringify(steady(a.body.sources)) === JSON.stringify(steady(b.body.sources)) &&
        JSON.stringify(a.body.sinks) === JSON.stringify(b.body.sinks);
      if (same) break;
      await new Promise((r) => setTimeout(r, 250));
      [a, b] = await read();
    }
    expect(a.status).toBe(200);
    expect(steady(b.body.sources)).toEqual(steady(a.body.sources));
    expect(b.body.sinks).toEqual(a.body.sinks);
    for (const s of a.body.sources) expect(s.polled_by).toBe(a.body.sources[0].polled_by);
    const [da, db] = await Promise.all([
      call(poll, TOKEN, 'GET', '/api/v1/dead-letters?sink=picky&limit=100'),
      call(work, TOKEN, 'GET', '/api/v1/dead-letters?sink=picky&limit=100'),
    ]);
    expect(da.body).toEqual(db.body);
    expect(da.body.dead_letters.map((d: { key: string }) => d.key).sort()).toEqual(refused().sort());
    const [sa, sb] = await Promise.all([
      call(poll, TOKEN, 'GET', '/api/v1/sinks'),
      call(work, TOKEN, 'GET', '/api/v1/sinks'),
    ]);
    expect(sa.body.activity).toEqual([]);
    const picky = sb.body.activity.find((x: { sink: string }) => x.sink === 'picky');
    expect(picky.failed_per_minute.reduce((x: number, y: number) => x + y, 0)).toBe(refused().length);
  });

  it('refuses a cursor move through either replica, naming the poller that holds the source', async () => {
    const holder = (await call(poll, TOKEN, 'GET', '/api/v1/sources')).body.sources[0].polled_by;
    for (const api of [poll, work]) {
      const r = await call(api, TOKEN, 'PUT', '/api/v1/sources/scheduling/cursor', { cursor: 1 });
      expect(r.status).toBe(409);
      expect(r.body.holder).toBe(holder);
    }
  });

  it('takes a console session made by one replica on the other (the replicas behind one Service)', async () => {
    const login = await call(poll, undefined, 'POST', '/login', { token: TOKEN });
    const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0]!;
    const session = await call(work, undefined, 'GET', '/api/v1/session', undefined, { cookie });
    expect(session.status).toBe(200);
    expect(session.body).toEqual(login.body);
    const dry = await call(
      work,
      undefined,
      'POST',
      '/api/v1/dead-letters/drop',
      { filter: {}, dry_run: true },
      {
        cookie,
        origin: work.url,
        'x-csrf-token': login.body.csrf,
      },
    );
    expect(dry.body.count).toBe(refused().length);
  });

  it('retries through the poller; the worker delivers', async () => {
    rmSync(flag);
    const r = await call(poll, TOKEN, 'POST', '/api/v1/dead-letters/retry', { filter: { sink: 'picky' } });
    expect(r.body).toEqual({ action: 'retry', dry_run: false, count: refused().length });
    await waitFor(
      () => refused().every((k) => pickyKeys().includes(k)),
      30_000,
      'the retried changes delivered by the worker',
    );
    expect((await call(work, TOKEN, 'GET', '/api/v1/dead-letters')).body.dead_letters).toEqual([]);
  });
});
