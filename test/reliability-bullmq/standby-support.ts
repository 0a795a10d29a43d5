// Oracles of the scaled-mode suites (standby pollers): who holds which source's lease, the page
// commit counters, and every slice job BullMQ holds — read straight from Redis.
import { Queue } from 'bullmq';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import type { Change } from '../../src/core/change.js';
import type { CliProcess } from '../support/process.js';

export const SOURCES = ['scheduling', 'workflow'] as const;

export interface RedisOracle {
  /** `host:pid` of the lease holder per source (undefined: free). */
  holders(): Promise<Record<string, string | undefined>>;
  /** Pages and slice jobs the producers committed (one count per commit). */
  commitStats(): Promise<{ pages: number; slices: number }>;
  /** Every slice job of `sink` (all states; completed ones are retained in these suites). */
  sliceJobs(sink: string, shards: number): Promise<{ id: string; changes: Change[] }[]>;
  close(): Promise<void>;
}

export function redisOracle(redisUrl: string, prefix: string): RedisOracle {
  const client = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  client.on('error', () => undefined);
  const tag = `{${prefix}}`;
  return {
    async holders() {
      const values = await client.mget(...SOURCES.map((s) => `${tag}:lease:${s}`));
      return Object.fromEntries(
        SOURCES.map((s, i) => [s, values[i] ? values[i]!.slice(values[i]!.indexOf(' ') + 1) : undefined]),
      );
    },
    async commitStats() {
      const h = await client.hgetall(`${tag}:commit-stats`);
      return { pages: Number(h.pages ?? 0), slices: Number(h.slices ?? 0) };
    },
    async sliceJobs(sink, shards) {
      const jobs: { id: string; changes: Change[] }[] = [];
      for (let shard = 0; shard < shards; shard++) {
        const queue = new Queue(`${sink}.${shard}`, { connection: client.duplicate(), prefix: tag });
        try {
          const found = await queue.getJobs(
            ['completed', 'wait', 'active', 'delayed', 'failed', 'prioritized', 'waiting-children'],
            0,
            -1,
          );
          for (const job of found)
            if (job) jobs.push({ id: job.id!, changes: (job.data as { changes: Change[] }).changes });
        } finally {
          await queue.close();
          await queue.disconnect();
        }
      }
      return jobs;
    },
    async close() {
      client.disconnect();
    },
  };
}

/** The process whose pid ends the owner string `host:pid`. */
export function processOf(owner: string | undefined, procs: readonly CliProcess[]): CliProcess | undefined {
  if (!owner) return undefined;
  const pid = Number(owner.slice(owner.lastIndexOf(':') + 1));
  return procs.find((p) => p.pid === pid);
}

/**
 * For a suite with one sink: every change in exactly one slice job of it, and as many jobs as the
 * commits counted: no page was enqueued twice (a re-read page
 * would put its changes in a second job, or re-add a job the counters then count twice).
 */
export function sliceProblems(
  jobs: readonly { id: string; changes: Change[] }[],
  expectedKeys: readonly string[],
  committedSlices: number,
): string[] {
  const problems: string[] = [];
  const seen = new Map<string, string>();
  for (const job of jobs) {
    for (const change of job.changes) {
      const other = seen.get(change.key);
      if (other !== undefined) problems.push(`${change.key} is in two slice jobs: ${other} and ${job.id}`);
      seen.set(change.key, job.id);
    }
  }
  const missing = expectedKeys.filter((k) => !seen.has(k));
  if (missing.length)
    problems.push(`${missing.length} keys in no slice job, e.g. ${missing.slice(0, 3).join(', ')}`);
  if (jobs.length !== committedSlices)
    problems.push(`${jobs.length} slice jobs in Redis, but the commits counted ${committedSlices}`);
  return problems.slice(0, 10);
}

export interface FreezeProxy {
  /** redis://127.0.0.1:PORT of the proxy. */
  url: string;
  /**
   * Calls `freeze` once, synchronously, when the next page commit of `source` is past its lease
   * check (`at: 'read'`, the default), or when it sends its EXEC (`at: 'exec'`: that EXEC is then
   * held back, never forwarded, until `cut()` drops the connections with it in flight).
   */
  arm(source: string, freeze: () => void, at?: 'read' | 'exec'): void;
  /** Drops every connection through the proxy (the poller's commands in flight go unanswered). */
  cut(): void;
  readonly fired: boolean;
  close(): Promise<void>;
}

/**
 * A TCP proxy in front of Redis for one poller, to pause it in the middle of a page commit: a
 * commit sends WATCH, reads its lease and the source's cursor (HMGET) in one round trip, checks
 * the lease, then runs its MULTI/EXEC. When armed, the proxy calls `freeze` (the test SIGSTOPs the
 * poller) on the next HMGET of the source's state, and forwards the bytes unchanged: the poller
 * wakes with a lease it read before the freeze, as one paused right after its check would. Everything else passes through. (A poller reads that
 * hash otherwise only when it takes the source, which the armed holder does not do again.)
 */
export async function freezeProxy(redisPort: number): Promise<FreezeProxy> {
  let trigger: { source: string; freeze: () => void; at: 'read' | 'exec' } | undefined;
  // The source's commit has been read (HMGET seen): its EXEC is the next one on that connection.
  let execOf: Socket | undefined;
  let fired = false;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(redisPort, '127.0.0.1');
    sockets.add(client).add(upstream);
    client.on('data', (chunk: Buffer) => {
      const text = chunk.toString('latin1').toLowerCase();
      if (
        trigger &&
        text.includes('\r\nhmget\r\n') &&
        text.includes(`:source:${trigger.source.toLowerCase()}\r\n`)
      ) {
        if (trigger.at === 'exec') execOf = client;
        else {
          const { freeze } = trigger;
          trigger = undefined;
          fired = true;
          freeze();
        }
      } else if (trigger?.at === 'exec' && execOf === client && text.includes('\r\nexec\r\n')) {
        const { freeze } = trigger;
        trigger = undefined;
        fired = true;
        freeze();
        // Held back: the transaction stays in flight, unanswered, until the connection is cut.
        return;
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => client.write(chunk));
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('close', end).on('error', end);
    upstream.on('close', end).on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `redis://127.0.0.1:${port}`,
    arm: (source, freeze, at = 'read') => {
      trigger = { source, freeze, at };
    },
    cut: () => {
      for (const sock of sockets) sock.destroy();
    },
    get fired() {
      return fired;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
