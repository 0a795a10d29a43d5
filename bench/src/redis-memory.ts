// Redis memory per queued change (issue 29): `feedsync poll` alone (no `work`) on a fresh Redis
// queues a service's whole backlog; Redis's `used_memory` after, less before, divided by the
// changes queued (events × sinks; the bench has one sink). Nothing consumes the queue, so this is
// what a backlog costs in Redis while the workers are down or behind.
//
// drainQueued starts from the same state and then times N `work` processes draining that queued
// backlog: the delivery side's own rate, which a drain of `poll` + `work` does not show once the
// poller is its bottleneck (does a second `work` add anything).
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { backlogKey, KeySpace, sourceStateKey } from '../../dist/queue/bullmq/names.js';
import type { SandboxEvent, ServiceName } from '../../dist/sandbox/types.js';
import type { SandboxControl } from './control.js';
import { startFeedsync, writeConfig, type DrainOptions } from './drain.js';
import { JsonlTail } from './jsonl-tail.js';
import { cpuUs } from './proc-stats.js';
import { spawnChild, type SandboxInfo } from './procs.js';
import { startBenchRedis, type BenchRedis } from './redis.js';

export interface RedisMemoryResult {
  service: ServiceName;
  events: number;
  /** Changes that should be queued: events × sinks. */
  expected: number;
  /** Changes the backlog hash counts once the cursor is at the last event. */
  queued: number;
  /** The source's cursor when the wait ended, and the last event's id it waited for. */
  cursor: number | null;
  lastEventId: number;
  /** `INFO memory` used_memory (bytes) of the fresh Redis before poll started, and after it stopped. */
  usedMemoryBefore: number;
  usedMemoryAfter: number;
  /** (after − before) / expected. */
  bytesPerQueuedChange: number;
  /** Spawn of poll → cursor at the last event. */
  seconds: number;
  /** The cursor reached the last event and the backlog counts every change, within the time limit. */
  complete: boolean;
}

const SINK = 'file'; // writeConfig's jsonl sink
const PREFIX = 'bench';

async function usedMemory(client: Redis): Promise<number> {
  const m = /^used_memory:(\d+)\r?$/m.exec(await client.info('memory'));
  if (!m) throw new Error('INFO memory of the bench Redis has no used_memory line');
  return Number(m[1]);
}

interface QueueOptions {
  service: ServiceName;
  info: SandboxInfo;
  control: SandboxControl;
  events: SandboxEvent[];
  dir: string;
  timeoutMs: number;
  pollIntervalMs: number;
}

interface Queued {
  drainOpts: DrainOptions;
  configPath: string;
  jsonlPath: string;
  cursor: number | null;
  queued: number;
  lastEventId: number;
  /** Spawn of poll → cursor at the last event. */
  seconds: number;
  /** The cursor reached the last event and the backlog counts every change (× 1 sink). */
  complete: boolean;
}

/** `feedsync poll` alone queues the service's backlog in `redis`, and has stopped when this resolves. */
async function queueBacklog(opts: QueueOptions, redis: BenchRedis, client: Redis): Promise<Queued> {
  mkdirSync(opts.dir, { recursive: true });
  const drainOpts: DrainOptions = {
    mode: 'bullmq',
    works: 0,
    services: [opts.service],
    info: opts.info,
    control: opts.control,
    events: { [opts.service]: opts.events },
    dir: opts.dir,
    timeoutMs: opts.timeoutMs,
    pollIntervalMs: opts.pollIntervalMs,
    redisUrl: redis.url,
    redisPrefix: PREFIX,
  };
  const jsonlPath = join(opts.dir, 'changes.jsonl');
  const configPath = writeConfig(drainOpts, jsonlPath);
  const lastEventId = opts.events.reduce((a, e) => Math.max(a, e.id), 0);
  const stateKey = sourceStateKey(PREFIX, opts.service);
  const countKey = backlogKey(KeySpace.single(PREFIX).of(opts.service));
  const started = performance.now();
  const [poll] = startFeedsync(drainOpts, configPath);
  let cursor: number | null = null;
  let queued = 0;
  let seconds = 0;
  try {
    const deadline = Date.now() + opts.timeoutMs;
    // The cursor moves in the page's own transaction, after its jobs and backlog count.
    while (Date.now() < deadline) {
      const [c, q] = await Promise.all([client.hget(stateKey, 'cursor'), client.hget(countKey, SINK)]);
      cursor = c === null ? null : Number(c);
      queued = Number(q ?? 0);
      if (cursor !== null && cursor >= lastEventId) break;
      if (poll!.child.proc.exitCode !== null)
        throw new Error(`feedsync poll exited with ${poll!.child.proc.exitCode}: ${poll!.child.output()}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    seconds = (performance.now() - started) / 1000;
  } finally {
    await poll!.child.stop();
  }
  const complete = cursor !== null && cursor >= lastEventId && queued === opts.events.length;
  return { drainOpts, configPath, jsonlPath, cursor, queued, lastEventId, seconds, complete };
}

async function withBenchRedis<T>(work: (redis: BenchRedis, client: Redis) => Promise<T>): Promise<T> {
  const redis = await startBenchRedis();
  const client = new Redis(redis.url, { maxRetriesPerRequest: 1, lazyConnect: true });
  try {
    await client.connect();
    return await work(redis, client);
  } finally {
    client.disconnect();
    await redis.stop();
  }
}

export function measureQueuedMemory(opts: QueueOptions): Promise<RedisMemoryResult> {
  return withBenchRedis(async (redis, client) => {
    const usedMemoryBefore = await usedMemory(client);
    const q = await queueBacklog(opts, redis, client);
    // Read once poll has gone: its connections' buffers are not part of what the queue holds.
    const usedMemoryAfter = await usedMemory(client);
    const expected = opts.events.length; // × 1 sink
    return {
      service: opts.service,
      events: opts.events.length,
      expected,
      queued: q.queued,
      cursor: q.cursor,
      lastEventId: q.lastEventId,
      usedMemoryBefore,
      usedMemoryAfter,
      bytesPerQueuedChange: (usedMemoryAfter - usedMemoryBefore) / expected,
      seconds: q.seconds,
      complete: q.complete,
    };
  });
}

export interface QueuedDrainResult {
  service: ServiceName;
  works: number;
  events: number;
  /** Spawn of the `work` processes → every change in the sink. */
  seconds: number;
  eventsPerSecond: number;
  /** CPU µs per event of the `work` processes, and with the redis-server's over the same time. */
  cpuUsPerEvent: number | null;
  cpuUsPerEventWithRedis: number | null;
  /** The backlog was queued whole and every change reached the sink. */
  complete: boolean;
}

/** `poll` alone queues the backlog; then `works` × `feedsync work` drain it (nothing else running). */
export function drainQueued(opts: QueueOptions & { works: number }): Promise<QueuedDrainResult> {
  return withBenchRedis(async (redis, client) => {
    const q = await queueBacklog(opts, redis, client);
    const tail = new JsonlTail(
      q.jsonlPath,
      opts.events.map((e) => `${opts.service}:${e.id}`),
    );
    const redisAtStart = cpuUs(redis.pid, { reapedChildren: true });
    const started = performance.now();
    const works = Array.from({ length: opts.works }, () =>
      spawnChild(['work', '--config', q.configPath], { cwd: opts.dir }),
    );
    let seconds = 0;
    let cpu: (number | null)[] = [];
    let redisAtEnd: number | null = null;
    try {
      const deadline = Date.now() + opts.timeoutMs;
      while (tail.poll() > 0 && Date.now() < deadline) {
        for (const w of works)
          if (w.proc.exitCode !== null)
            throw new Error(`feedsync work exited with ${w.proc.exitCode}: ${w.output()}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      seconds = (performance.now() - started) / 1000;
    } finally {
      // Read while the processes are alive: /proc/<pid>/stat is gone after they exit.
      cpu = works.map((w) => cpuUs(w.pid));
      redisAtEnd = cpuUs(redis.pid, { reapedChildren: true });
      await Promise.all(works.map((w) => w.stop()));
      tail.close();
    }
    const events = opts.events.length;
    const workUs = cpu.some((c) => c === null) ? null : cpu.reduce<number>((a, c) => a + c!, 0);
    const redisUs = redisAtStart === null || redisAtEnd === null ? null : redisAtEnd - redisAtStart;
    return {
      service: opts.service,
      works: opts.works,
      events,
      seconds,
      eventsPerSecond: events / seconds,
      cpuUsPerEvent: workUs === null ? null : workUs / events,
      cpuUsPerEventWithRedis: workUs === null || redisUs === null ? null : (workUs + redisUs) / events,
      complete: q.complete && tail.missingCount === 0,
    };
  });
}
