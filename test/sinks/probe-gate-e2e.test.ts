// A webhook receiver that is down (503, Retry-After: 1) while real feedsync processes drain a
// sandbox backlog into it: `run` for the local driver, `poll` + `work` for bullmq. The receiver
// must see one probe at a time, at most two requests a second per delivering process after the
// first burst, not one request per queued change; once it is back, every change arrives exactly
// once. The same for a user sink taking batches that fails without a Retry-After. Issue #22: a
// down receiver used to get ~210 requests a second (without the gate, the webhook case measured
// 42/s with the local driver and 8/s with bullmq for its 80 changes).
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { FAILURES_TO_PROBE, MIN_PROBE_SPACING_MS } from '../../src/sinks/probe-gate.js';
import { parseSamples, sampleValue } from '../observability/prom-text.js';
import { rawConfig, tempDir } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig, type CliProcess } from '../support/process.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import {
  bullmqConfig,
  eventually,
  sandboxKeys,
  seedNote,
  stopGracefully,
  testSeed,
  waitStarted,
} from '../reliability-bullmq/support.js';

const BACKLOG = 40;
const DOWN_MS = 8_000;
const BATCH_DOWN_MS = 5_000;
const CONCURRENCY = 8;
const SHUTDOWN_MS = 5_000;
const seed = testSeed();
const note = seedNote(seed);

/** One call the batch sink got (a line of its log). */
interface SinkCall {
  at: number;
  keys: string[];
  ok: boolean;
}

interface Hit {
  key: string;
  at: number;
  status: number;
}

interface Receiver {
  url: string;
  hits: Hit[];
  /** When the first request came (the receiver goes back up DOWN_MS later); 0 before it. */
  firstAt(): number;
  upAt(): number;
  close(): Promise<void>;
}

/** Answers 503 with Retry-After: 1 from its first request for DOWN_MS, then 200. */
async function startReceiver(): Promise<Receiver> {
  const hits: Hit[] = [];
  let firstAt = 0;
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const at = Date.now();
      firstAt ||= at;
      const down = at < firstAt + DOWN_MS;
      const key = String(req.headers['x-feedsync-key'] ?? '');
      hits.push({ key, at, status: down ? 503 : 200 });
      if (down) res.writeHead(503, { 'retry-after': '1' }).end('down for maintenance');
      else res.writeHead(200).end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks/feedsync`,
    hits,
    firstAt: () => firstAt,
    upAt: () => firstAt + DOWN_MS,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

async function scrape(p: CliProcess): Promise<string> {
  const started = p.logs().find((e) => e.msg === 'feedsync started');
  const res = await fetch(`http://127.0.0.1:${Number(started?.metrics_port)}/metrics`);
  return res.text();
}

describe.each(['local', 'bullmq'] as const)(`a failing sink, %s driver ${note}`, (driver) => {
  let sandbox: Sandbox;
  let redis: RedisServer | undefined;
  let receiver: Receiver | undefined;

  beforeAll(async () => {
    if (driver === 'bullmq') redis = await startRedis();
    sandbox = await startSandbox({ seed, backlog: BACKLOG, rate: 0 });
  });
  afterAll(async () => {
    await killAllCli();
    await receiver?.close();
    await sandbox?.close();
    await redis?.stop();
  });

  /** `run`, or `poll` + `work`, on a store (or queue prefix) of their own; the last one delivers. */
  async function launch(sinks: Record<string, unknown>[], queueOverrides: Record<string, unknown> = {}) {
    const own = tempDir(`feedsync-probe-${driver}-`);
    // Backoff steps that grow past Retry-After while the sink is down: 200 ms doubling up to 4 s.
    const queue = { concurrency: CONCURRENCY, backoff_ms: 200, max_backoff_ms: 4000, ...queueOverrides };
    const raw =
      driver === 'bullmq'
        ? bullmqConfig(sandbox, own, redis!.url, {
            sinks,
            queue: { ...queue, shards: 8 },
            shutdownTimeoutMs: SHUTDOWN_MS,
          })
        : {
            ...rawConfig(sandbox, own, { sinks, queue }),
            shutdown_timeout_ms: SHUTDOWN_MS,
            log: { level: 'info' },
          };
    const configPath = writeConfig(own, raw);
    const procs =
      driver === 'bullmq'
        ? [spawnCli(['poll'], { config: configPath }), spawnCli(['work'], { config: configPath })]
        : [spawnCli(['run'], { config: configPath })];
    await waitStarted(...procs);
    return { procs, deliverer: procs[procs.length - 1]! };
  }

  it('a down webhook receiver is probed at most twice a second, then gets every change exactly once', async () => {
    receiver = await startReceiver();
    const { procs, deliverer } = await launch([
      { name: 'hook', type: 'webhook', url: receiver.url, timeout_ms: 2000 },
    ]);

    const keys = sandboxKeys(sandbox);
    const delivered = () => new Set(receiver!.hits.filter((h) => h.status === 200).map((h) => h.key));
    // Down for DOWN_MS, then the next probe (at most one 4 s step away) and the drain.
    await eventually(
      () => keys.every((k) => delivered().has(k)),
      DOWN_MS + 15_000,
      `every change delivered after the receiver came back ${note}`,
    );
    // Anything sent twice would arrive within this.
    await new Promise((r) => setTimeout(r, 1500));

    const hits = receiver.hits;
    const firstAt = receiver.firstAt();
    const upAt = receiver.upAt();
    const whileDown = hits.filter((h) => h.at < upAt);
    const firstSecond = whileDown.filter((h) => h.at < firstAt + 1000);
    const afterBurst = whileDown.filter((h) => h.at >= firstAt + 1000);
    const busiestSecond = Math.max(
      0,
      ...afterBurst.map((h) => afterBurst.filter((o) => o.at >= h.at && o.at < h.at + 1000).length),
    );
    const perSecond = afterBurst.length / ((upAt - firstAt - 1000) / 1000);
    const firstOk = hits.find((h) => h.status === 200)!.at;
    console.info(
      `[${driver}] while down ${DOWN_MS} ms: ${whileDown.length} requests (${firstSecond.length} in the first second, ` +
        `then ${afterBurst.length}: ${perSecond.toFixed(2)}/s, busiest second ${busiestSecond}); ` +
        `first 200 ${firstOk - upAt} ms after it came back, all ${keys.length} delivered ` +
        `${Math.max(...hits.map((h) => h.at)) - upAt} ms after`,
    );

    // The burst: one call per lane or shard slot, and one more for each slot freed by the failures
    // before the one that makes the sink failing.
    expect(firstSecond.length, note).toBeLessThanOrEqual(CONCURRENCY + FAILURES_TO_PROBE - 1);
    expect(busiestSecond, `requests in any second while down ${note}`).toBeLessThanOrEqual(2);
    // It was probed (not simply left alone) while down, no sooner than Retry-After asks.
    expect(afterBurst.length, note).toBeGreaterThanOrEqual(3);
    const probeTimes = afterBurst.map((h) => h.at);
    for (let i = 1; i < probeTimes.length; i++)
      expect(probeTimes[i]! - probeTimes[i - 1]!, `probe spacing ${note}`).toBeGreaterThanOrEqual(990);

    // Every change exactly once, by key.
    const okPerKey = new Map<string, number>();
    for (const h of hits) if (h.status === 200) okPerKey.set(h.key, (okPerKey.get(h.key) ?? 0) + 1);
    expect([...okPerKey.keys()].sort(), note).toEqual([...keys].sort());
    expect(
      [...okPerKey].filter(([, n]) => n !== 1),
      `keys delivered more than once ${note}`,
    ).toEqual([]);

    // One line when it started failing and one when it answered again; one failure line per real
    // request refused, none per change held back without a request.
    const logs = deliverer.logs();
    const failing = logs.filter(
      (e) => e.msg === 'sink failing: its deliveries wait, one probe at a time until it answers',
    );
    const recovered = logs.filter((e) => e.msg === 'sink answers again; delivering at full speed');
    expect(failing, note).toHaveLength(1);
    expect(recovered, note).toHaveLength(1);
    expect(recovered[0]).toMatchObject({ sink: 'hook', probes: afterBurst.length + 1 });
    expect(
      logs.filter((e) => e.msg === 'delivery failed; will retry'),
      note,
    ).toHaveLength(whileDown.length);

    const samples = parseSamples(await scrape(deliverer));
    expect(sampleValue(samples, 'feedsync_deliveries_total', { sink: 'hook', outcome: 'retry' })).toBe(
      whileDown.length,
    );
    expect(sampleValue(samples, 'feedsync_deliveries_total', { sink: 'hook', outcome: 'ok' })).toBe(
      keys.length,
    );
    expect(sampleValue(samples, 'feedsync_sink_probes_total', { sink: 'hook', outcome: 'failed' })).toBe(
      afterBurst.length,
    );
    expect(sampleValue(samples, 'feedsync_sink_probes_total', { sink: 'hook', outcome: 'ok' })).toBe(1);
    expect(sampleValue(samples, 'feedsync_sink_failing', { sink: 'hook' })).toBe(0);

    const exits = await stopGracefully(procs, SHUTDOWN_MS);
    for (const exit of exits) expect(exit, `graceful stop ${note}`).toMatchObject({ code: 0, signal: null });
  });

  // A batch that fails (no Retry-After) makes bullmq go on change by change: those calls must be
  // held back by the gate, not sent; and with no Retry-After the 500 ms floor alone is the limit.
  it('probes a failing batch sink one call at a time, then it applies every change once', async () => {
    const own = tempDir(`feedsync-probe-batch-${driver}-`);
    const log = join(own, 'calls.jsonl');
    const flag = join(own, 'down');
    writeFileSync(flag, '');
    const { procs, deliverer } = await launch(
      [
        {
          name: 'batches',
          type: 'module',
          module: resolve(import.meta.dirname, 'support/flaky-batch-sink.mjs'),
          options: { path: log, down_flag: flag },
        },
      ],
      // Failed probes spend attempts (they are real calls): none may run out while it is down.
      { attempts: 100, backoff_ms: 100, max_backoff_ms: 1000 },
    );
    const calls = (): SinkCall[] =>
      existsSync(log)
        ? readFileSync(log, 'utf8')
            .split('\n')
            .filter(Boolean)
            .map((l) => JSON.parse(l) as SinkCall)
        : [];
    await eventually(() => calls().length > 0, 20_000, `a first call ${note}`);
    const firstAt = calls()[0]!.at;
    await new Promise((r) => setTimeout(r, firstAt + BATCH_DOWN_MS - Date.now()));
    rmSync(flag);

    const keys = sandboxKeys(sandbox);
    const applied = () => new Set(calls().flatMap((c) => (c.ok ? c.keys : [])));
    await eventually(
      () => keys.every((k) => applied().has(k)),
      15_000,
      `every change applied after the sink came back ${note}`,
    );
    await new Promise((r) => setTimeout(r, 1000));

    const all = calls();
    const failed = all.filter((c) => !c.ok);
    const afterBurst = failed.filter((c) => c.at >= firstAt + 1000);
    const busiestSecond = Math.max(
      0,
      ...afterBurst.map((c) => afterBurst.filter((o) => o.at >= c.at && o.at < c.at + 1000).length),
    );
    console.info(
      `[${driver}] batch sink down ${BATCH_DOWN_MS} ms: ${failed.length} calls (${failed.length - afterBurst.length} ` +
        `in the first second, then ${afterBurst.length}, busiest second ${busiestSecond}); ` +
        `${all.length - failed.length} calls applied ${keys.length} changes`,
    );
    expect(failed.length - afterBurst.length, note).toBeLessThanOrEqual(CONCURRENCY + FAILURES_TO_PROBE - 1);
    expect(busiestSecond, `calls in any second while down ${note}`).toBeLessThanOrEqual(2);
    expect(afterBurst.length, note).toBeGreaterThanOrEqual(3);
    for (let i = 1; i < afterBurst.length; i++)
      expect(afterBurst[i]!.at - afterBurst[i - 1]!.at, `probe spacing ${note}`).toBeGreaterThanOrEqual(
        MIN_PROBE_SPACING_MS - 10,
      );

    const appliedPerKey = new Map<string, number>();
    for (const c of all)
      if (c.ok) for (const k of c.keys) appliedPerKey.set(k, (appliedPerKey.get(k) ?? 0) + 1);
    expect([...appliedPerKey.keys()].sort(), note).toEqual([...keys].sort());
    expect(
      [...appliedPerKey].filter(([, n]) => n !== 1),
      `changes applied more than once ${note}`,
    ).toEqual([]);
    const samples = parseSamples(await scrape(deliverer));
    expect(sampleValue(samples, 'feedsync_dead_letters', { sink: 'batches' }), note).toBe(0);

    const exits = await stopGracefully(procs, SHUTDOWN_MS);
    for (const exit of exits) expect(exit, `graceful stop ${note}`).toMatchObject({ code: 0, signal: null });
  });
});
