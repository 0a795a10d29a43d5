// Scaled mode under a least-privilege Redis user (docs/scaled-mode.md, "Redis ACL"): the ACL line
// is read from the doc itself, checked against every command BullMQ's scripts and feedsync call,
// and a `-@all` user holding exactly that runs poll, work, status, cursor and dlq without a single
// refusal. Then a user missing one command (EVAL): one log line and a count instead of one a
// retry, /readyz 503 naming the permission, and ready again once the ACL is fixed — no restart.
import { Cluster, Redis } from 'ioredis';
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { rawConfig, readJsonl, tempDir, waitFor } from '../support/harness.js';
import type { LogEntry } from '../support/process.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { startRedisCluster, type RedisClusterSet } from '../support/redis-cluster.js';
import { killAllCli, metricsPortOf, runCli, spawnCli, writeConfig, type CliProcess } from './support/cli.js';
import { exerciseDlq, linesOf } from './support/dlq-flow.js';

const ROOT = resolve(import.meta.dirname, '../..');
const PASSWORD = 'acl-pw-7Hq2';
const SERVICES = ['scheduling', 'workflow'] as const;
const EVERY = 7;
/**
 * Commands feedsync probes and copes without (docs: "Optional, each with a fallback"), and `wait`,
 * needed only with queue.min_replicas_acked ≥ 1 (listed there too).
 */
const OPTIONAL = new Set([
  'info',
  'config|get',
  'config',
  'role',
  'client|setname',
  'client',
  'select',
  'wait',
  'cluster|info',
  'cluster',
]);

/** The `ACL SETUSER feedsync …` line of docs/scaled-mode.md, as arguments after SETUSER. */
function documentedAcl(user = 'feedsync'): string[] {
  const doc = readFileSync(join(ROOT, 'docs/scaled-mode.md'), 'utf8');
  const line = /^ACL SETUSER feedsync .*$/m.exec(doc)?.[0];
  if (!line) throw new Error('no "ACL SETUSER feedsync" line in docs/scaled-mode.md');
  return line
    .split(/\s+/)
    .slice(2)
    .map((arg) => (arg === 'feedsync' ? user : arg === '>PASSWORD' ? `>${PASSWORD}` : arg));
}

function documentedCommands(): Set<string> {
  return new Set(
    documentedAcl()
      .filter((a) => a.startsWith('+'))
      .map((a) => a.slice(1).toLowerCase()),
  );
}

/** Every file under `dir` (recursively) whose name ends with `ext`. */
function filesUnder(dir: string, ext: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith(ext))
    .map((e) => join(e.parentPath, e.name));
}

/** Commands named in Lua: redis.call('X'), rcall('X'), and BullMQ's command-valued locals. */
function luaCommands(files: string[]): Set<string> {
  const found = new Set<string>();
  for (const file of files) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/(?:rcall|redis\.p?call)\(\s*\\?['"]([A-Za-z]+)\\?['"]/g))
      found.add(m[1]!.toLowerCase());
    for (const m of text.matchAll(
      /(?:local \w+ = |and |or |== )\\?['"](LPUSH|RPUSH|HLEN|SCARD|HSCAN|SSCAN|ZSCAN|LLEN)\\?['"]/g,
    ))
      found.add(m[1]!.toLowerCase());
  }
  return found;
}

describe('the documented ACL', () => {
  it("holds every command in BullMQ's Lua scripts and in feedsync's own scripts and calls", () => {
    const documented = documentedCommands();
    const bullmq = luaCommands(filesUnder(join(ROOT, 'node_modules/bullmq/dist/esm/scripts'), '.js'));
    expect(bullmq.size).toBeGreaterThan(40);
    expect([...bullmq].filter((c) => !documented.has(c))).toEqual([]);
    const ours = filesUnder(join(ROOT, 'src'), '.ts');
    expect([...luaCommands(ours)].filter((c) => !documented.has(c))).toEqual([]);
    // ioredis calls on connections in the bullmq driver (its scripts go through eval).
    const called = new Set<string>();
    for (const file of filesUnder(join(ROOT, 'src/queue/bullmq'), '.ts'))
      for (const m of readFileSync(file, 'utf8').matchAll(
        /\b(?:client|connection|commitConnection|stateConnection|tx|pipeline)\.(\w+)\(/g,
      ))
        called.add(m[1]!.toLowerCase());
    const notCommands = new Set([
      'on',
      'once',
      'off',
      'disconnect',
      'duplicate',
      'call',
      'connect',
      'sendcommand',
      'pipeline',
    ]);
    expect([...called].filter((c) => !documented.has(c) && !OPTIONAL.has(c) && !notCommands.has(c))).toEqual(
      [],
    );
    // The key pattern is the hash-tagged prefix, braces included.
    expect(documentedAcl()).toContain('~{feedsync}:*');
    expect(documentedAcl()).toContain('-@all');
  });
});

const dir = tempDir('feedsync-ops-acl-');
let sandbox: Sandbox;
const procs: CliProcess[] = [];

beforeAll(async () => {
  sandbox = await startSandbox({ seed: 41, backlog: 90, rate: 0 });
});

afterAll(async () => {
  await Promise.all(procs.map((p) => p.stop()));
  await killAllCli();
  await sandbox?.close();
  rmSync(dir, { recursive: true, force: true });
});

function config(
  name: string,
  redisUrl: string,
  opts: { queue?: Record<string, unknown>; picky?: boolean } = {},
): { file: string; cli: (...args: string[]) => ReturnType<typeof runCli> } {
  const raw = rawConfig(sandbox, dir, {
    queue: { driver: 'bullmq', redis_url: redisUrl, prefix: 'feedsync', ...opts.queue },
    sinks: [
      { name: 'file', type: 'jsonl', path: join(dir, `${name}.jsonl`) },
      ...(opts.picky
        ? [
            {
              name: 'picky',
              type: 'module',
              module: resolve(import.meta.dirname, 'support/refusing-sink.mjs'),
              options: {
                path: join(dir, `${name}-picky.txt`),
                refuse_flag: join(dir, 'refuse'),
                every: EVERY,
              },
            },
          ]
        : []),
    ],
  });
  raw.log = { level: 'info' };
  const file = writeConfig(dir, raw, `${name}.yaml`);
  return { file, cli: (...args: string[]) => runCli(['--config', file, ...args]) };
}

const newest = (s: (typeof SERVICES)[number]): number => Math.max(...sandbox.events(s).map((e) => e.id));
const warnings = (p: CliProcess, kind: string): LogEntry[] =>
  p.logs().filter((l) => l.level === 40 && l.kind === kind);

describe('a -@all user holding exactly the documented commands', () => {
  let redis: RedisServer;
  let admin: Redis;

  beforeAll(async () => {
    redis = await startRedis();
    admin = new Redis(redis.url);
    await admin.call('ACL', 'SETUSER', ...documentedAcl());
  });
  afterAll(async () => {
    admin?.disconnect();
    await redis?.stop();
  });

  it('the natural mistake ~feedsync:* (no braces) matches none of the keys', async () => {
    const mistaken = documentedAcl('mistaken').map((a) => (a === '~{feedsync}:*' ? '~feedsync:*' : a));
    await admin.call('ACL', 'SETUSER', ...mistaken);
    const client = new Redis(`redis://mistaken:${PASSWORD}@127.0.0.1:${redis.port}`, {
      enableReadyCheck: false,
    });
    try {
      await expect(client.hget('{feedsync}:source:scheduling', 'cursor')).rejects.toThrow(
        /NOPERM .*no permissions to access one of the keys/,
      );
    } finally {
      client.disconnect();
      await admin.call('ACL', 'DELUSER', 'mistaken');
    }
  });

  it('runs poll, status, work, dlq and cursor, and Redis refuses it nothing but the optional probes', async () => {
    writeFileSync(join(dir, 'refuse'), '');
    const c = config('acl', `redis://feedsync:${PASSWORD}@127.0.0.1:${redis.port}`, {
      queue: { attempts: 2, backoff_ms: 20, max_backoff_ms: 100 },
      picky: true,
    });
    const poller = spawnCli(['--config', c.file, 'poll']);
    procs.push(poller);
    await waitFor(
      async () => {
        const cursors = await Promise.all(
          SERVICES.map((s) => admin.hget(`{feedsync}:source:${s}`, 'cursor')),
        );
        return SERVICES.every((s, i) => Number(cursors[i]) === newest(s));
      },
      30_000,
      'the poller to queue both feeds to their end',
    );
    // Neither CONFIG GET nor INFO is allowed: the poller cannot tell whether Redis persists, says
    // so and starts anyway; BullMQ's INFO version check is off.
    expect(
      poller.logs().some((l) => l.level === 40 && /cannot tell whether Redis persists/.test(String(l.msg))),
    ).toBe(true);
    expect(poller.logs().some((l) => /may not run INFO/.test(String(l.msg)))).toBe(true);

    const status = await c.cli('status', '--json');
    expect(status.code, status.stderr).toBe(0);
    const sources = (JSON.parse(status.stdout) as { sources: { source: string; cursor: number }[] }).sources;
    expect(sources.map((s) => s.cursor)).toEqual(SERVICES.map(newest));

    const worker = spawnCli(['--config', c.file, 'work']);
    procs.push(worker);
    const expected = SERVICES.flatMap((s) => sandbox.events(s).map((e) => `${s}:${e.id}`));
    const refused = expected.filter((k) => Number(k.split(':')[1]) % EVERY === 0);
    const pickyPath = join(dir, 'acl-picky.txt');
    await waitFor(
      () =>
        new Set(readJsonl(join(dir, 'acl.jsonl')).map((ch) => ch.key)).size === expected.length &&
        linesOf(pickyPath).length >= expected.length - refused.length,
      30_000,
      'the worker to deliver every change',
    );
    await waitFor(
      async () => {
        const list = await c.cli('dlq', 'list', '--json');
        return list.code === 0 && (JSON.parse(list.stdout) as unknown[]).length === refused.length;
      },
      15_000,
      'every refused change dead-lettered',
    );
    await exerciseDlq({ cli: c.cli, refused, pickyPath, flag: join(dir, 'refuse') });

    expect((await poller.stop()).code).toBe(0);
    const set = await c.cli('cursor', 'set', 'scheduling', '3');
    expect(set.code, set.stderr).toBe(0);
    expect((await c.cli('cursor', 'show')).stdout).toMatch(/^scheduling\t3$/m);
    expect((await worker.stop()).code).toBe(0);

    // ACL LOG records every refusal: none but the probes feedsync copes without.
    const entries = (await admin.call('ACL', 'LOG', '1000')) as unknown[][];
    const refusals = entries
      .map((e) => Object.fromEntries(chunk(e)) as Record<string, unknown>)
      .filter((e) => e.username === 'feedsync')
      .map((e) => `${String(e.reason)} ${String(e.object)}`);
    expect(refusals.filter((r) => !OPTIONAL.has(r.split(' ')[1]!))).toEqual([]);
    // The probes were refused (so their fallbacks ran) and nothing else.
    expect(refusals).toContain('command info');
    expect(refusals).toContain('command config|get');
    for (const p of [poller, worker]) {
      expect(p.logs().filter((l) => l.kind === 'noperm')).toEqual([]);
      // Without INFO, ioredis' own ready check (off then) would warn on stderr per connection.
      expect(p.stderr().join('\n')).not.toMatch(/ready check|INFO command fails/);
    }
  });
});

/** The cluster additions: the second `ACL SETUSER feedsync` line of docs/scaled-mode.md. */
function documentedClusterAcl(): string[] {
  const doc = readFileSync(join(ROOT, 'docs/scaled-mode.md'), 'utf8');
  const lines = [...doc.matchAll(/^ACL SETUSER feedsync .*$/gm)].map((m) => m[0]);
  if (lines.length < 2) throw new Error('no cluster "ACL SETUSER feedsync" line in docs/scaled-mode.md');
  return lines[1]!.split(/\s+/).slice(2);
}

describe('the same user on a Redis Cluster, with the documented cluster additions', () => {
  const CLUSTER_PW = 'cluster-admin-pw';
  let cluster: RedisClusterSet;
  let nodes: Redis[] = [];
  let view: Cluster;

  beforeAll(async () => {
    cluster = await startRedisCluster({ password: CLUSTER_PW });
    nodes = cluster.ports.map((port) => new Redis({ port, host: '127.0.0.1', password: CLUSTER_PW }));
    for (const node of nodes) {
      await node.call('ACL', 'SETUSER', ...documentedAcl());
      await node.call('ACL', 'SETUSER', ...documentedClusterAcl());
    }
    view = new Cluster([{ host: '127.0.0.1', port: cluster.ports[0]! }], {
      redisOptions: { password: CLUSTER_PW },
    });
  }, 60_000);
  afterAll(async () => {
    view?.disconnect();
    for (const node of nodes) node.disconnect();
    await cluster?.stop();
  });

  it('runs poll, status, work, dlq and cursor; no node refuses it anything but the optional probes', async () => {
    const seeds = cluster.url.replace(/^.*@/, '');
    const c = config('acl-cluster', `redis+cluster://feedsync:${PASSWORD}@${seeds}`, {
      queue: { attempts: 1, backoff_ms: 20, max_backoff_ms: 100 },
      picky: true,
    });
    writeFileSync(join(dir, 'refuse'), '');
    const poller = spawnCli(['--config', c.file, 'poll']);
    const worker = spawnCli(['--config', c.file, 'work']);
    procs.push(poller, worker);
    const expected = SERVICES.flatMap((s) => sandbox.events(s).map((e) => `${s}:${e.id}`));
    const refused = expected.filter((k) => Number(k.split(':')[1]) % EVERY === 0);
    await waitFor(
      async () => {
        const cursors = await Promise.all(
          SERVICES.map((s) => view.hget(`{feedsync:${s}}:source:${s}`, 'cursor')),
        );
        return (
          SERVICES.every((s, i) => Number(cursors[i]) === newest(s)) &&
          new Set(readJsonl(join(dir, 'acl-cluster.jsonl')).map((ch) => ch.key)).size === expected.length
        );
      },
      45_000,
      'both feeds queued to their end and delivered',
    );
    const status = await c.cli('status', '--json');
    expect(status.code, status.stderr).toBe(0);
    await waitFor(
      async () => {
        const list = await c.cli('dlq', 'list', '--json');
        return list.code === 0 && (JSON.parse(list.stdout) as unknown[]).length === refused.length;
      },
      15_000,
      'every refused change dead-lettered',
    );
    rmSync(join(dir, 'refuse'));
    const retry = await c.cli('dlq', 'retry', '--all');
    expect(retry.code, retry.stderr).toBe(0);
    await waitFor(
      () => linesOf(join(dir, 'acl-cluster-picky.txt')).length >= expected.length,
      15_000,
      'the retried changes delivered',
    );
    expect((await poller.stop()).code).toBe(0);
    const set = await c.cli('cursor', 'set', 'scheduling', '3');
    expect(set.code, set.stderr).toBe(0);
    expect((await worker.stop()).code).toBe(0);

    const refusals: string[] = [];
    for (const node of nodes) {
      const entries = (await node.call('ACL', 'LOG', '1000')) as unknown[][];
      for (const e of entries.map((x) => Object.fromEntries(chunk(x)) as Record<string, unknown>))
        if (e.username === 'feedsync') refusals.push(`${String(e.reason)} ${String(e.object)}`);
    }
    expect(refusals.filter((r) => !OPTIONAL.has(r.split(' ')[1]!))).toEqual([]);
    for (const p of [poller, worker]) expect(p.logs().filter((l) => l.kind === 'noperm')).toEqual([]);
  });
});

function chunk(flat: unknown[]): [string, unknown][] {
  const out: [string, unknown][] = [];
  for (let i = 0; i + 1 < flat.length; i += 2) out.push([String(flat[i]), flat[i + 1]]);
  return out;
}

describe('a user missing one command the poller needs (EVAL)', () => {
  let redis: RedisServer;
  let admin: Redis;

  beforeAll(async () => {
    redis = await startRedis();
    admin = new Redis(redis.url);
    await admin.call('ACL', 'SETUSER', ...documentedAcl('lacking').filter((a) => a !== '+eval'));
  });
  afterAll(async () => {
    admin?.disconnect();
    await redis?.stop();
  });

  it('logs the refusal once with what to do, /readyz is 503 naming it, and 200 once the ACL is fixed', async () => {
    // A short lease TTL: the poller retries the lease four times a second.
    const c = config('lacking', `redis://lacking:${PASSWORD}@127.0.0.1:${redis.port}`, {
      queue: { lease_ttl_ms: 1000 },
    });
    const poller = spawnCli(['--config', c.file, 'poll']);
    procs.push(poller);
    const port = await metricsPortOf(poller);
    const first = await poller.waitForLog((l) => l.kind === 'noperm', 15_000, 'the NOPERM warning');
    expect(first).toMatchObject({
      level: 40,
      msg: 'redis command refused (noperm): the Redis user lacks a permission: see docs/scaled-mode.md#redis-acl',
      command: 'EVAL',
    });
    expect(String(first.err)).toMatch(/NOPERM .*'eval' command/);

    // Many refusals later: still that one line; the counter has them all.
    let refusals = 0;
    await waitFor(
      async () => {
        const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
        refusals = Number(/^feedsync_redis_errors_total\{kind="noperm"\} (\d+)/m.exec(text)?.[1] ?? 0);
        return refusals >= 20;
      },
      20_000,
      '20 refusals counted',
    );
    expect(warnings(poller, 'noperm')).toHaveLength(1);
    expect(poller.logs().filter((l) => /cannot reach redis/.test(String(l.msg)))).toEqual([]);

    const unready = await fetch(`http://127.0.0.1:${port}/readyz`);
    expect(unready.status).toBe(503);
    const body = (await unready.json()) as { reasons: string[] };
    expect(body.reasons.join('\n')).toMatch(
      /check "redis" failed: redis noperm \(lock connection, EVAL(?:SHA)?\): NOPERM .*'eval' command; the Redis user lacks a permission: see docs\/scaled-mode\.md#redis-acl/,
    );

    await admin.call('ACL', 'SETUSER', 'lacking', '+eval');
    await poller.waitForLog((l) => /acquired the lease of source/.test(String(l.msg)), 15_000, 'a lease');
    // Neither ROLE nor INFO is allowed to this user: readiness goes by PING and the monitor.
    let last = '';
    await waitFor(
      async () => {
        // As Prometheus would: the queue counts read at scrape time were refused too (admin
        // connection); a refused command counts until it succeeds again.
        await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
        const res = await fetch(`http://127.0.0.1:${port}/readyz`);
        last = await res.text();
        return res.status === 200;
      },
      10_000,
      '/readyz 200 after the ACL fix',
    ).catch((err: Error) => {
      throw new Error(`${err.message}; last /readyz: ${last}`);
    });

    expect((await poller.stop()).code).toBe(0);
    // The last line at shutdown carries the refusals not logged since the first.
    const lines = warnings(poller, 'noperm');
    expect(lines).toHaveLength(2);
    expect(Number(lines[1]!.repeated)).toBeGreaterThanOrEqual(refusals - 1);
  });
});
