// Redis memory per queued change (issue 29): `feedsync poll` alone (no `work`) on a fresh Redis
// queues a service's whole backlog; Redis's `used_memory` after, less before, divided by the
// changes queued (events × sinks; the bench has one sink). Nothing consumes the queue, so this is
// what a backlog costs in Redis while the workers are down or behind.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { backlogKey, KeySpace, sourceStateKey } from '../../dist/queue/bullmq/names.js';
import type { SandboxEvent, ServiceName } from '../../dist/sandbox/types.js';
import type { SandboxControl } from './control.js';
import { startFeedsync, writeConfig, type DrainOptions } from './drain.js';
import type { SandboxInfo } from './procs.js';
import { startBenchRedis } from './redis.js';

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

async function usedMemory(client: Redis): Promise<number> {
  const m = /^used_memory:(\d+)\r?$/m.exec(await client.info('memory'));
  if (!m) throw new Error('INFO memory of the bench Redis has no used_memory line');
  return Number(m[1]);
}

export async function measureQueuedMemory(opts: {
  service: ServiceName;
  info: SandboxInfo;
  control: SandboxControl;
  events: SandboxEvent[];
  dir: string;
  timeoutMs: number;
  pollIntervalMs: number;
}): Promise<RedisMemoryResult> {
  mkdirSync(opts.dir, { recursive: true });
  const prefix = 'bench';
  const redis = await startBenchRedis();
  const client = new Redis(redis.url, { maxRetriesPerRequest: 1, lazyConnect: true });
  try {
    await client.connect();
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
      redisPrefix: prefix,
    };
    const configPath = writeConfig(drainOpts, join(opts.dir, 'changes.jsonl'));
    const expected = opts.events.length; // × 1 sink
    const lastEventId = opts.events.reduce((a, e) => Math.max(a, e.id), 0);
    const stateKey = sourceStateKey(prefix, opts.service);
    const countKey = backlogKey(KeySpace.single(prefix).of(opts.service));
    const usedMemoryBefore = await usedMemory(client);
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
    // Read once poll has gone: its connections' buffers are not part of what the queue holds.
    const usedMemoryAfter = await usedMemory(client);
    return {
      service: opts.service,
      events: opts.events.length,
      expected,
      queued,
      cursor,
      lastEventId,
      usedMemoryBefore,
      usedMemoryAfter,
      bytesPerQueuedChange: (usedMemoryAfter - usedMemoryBefore) / expected,
      seconds,
      complete: cursor !== null && cursor >= lastEventId && queued === expected,
    };
  } finally {
    client.disconnect();
    await redis.stop();
  }
}
