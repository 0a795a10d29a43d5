// Oracles of the scaled-mode suites (standby pollers): who holds which source's lease, the page
// commit counters — read straight from Redis — and what the sink got.
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import type { Change } from '../../src/core/change.js';
import type { CliProcess } from '../support/process.js';

export const SOURCES = ['scheduling', 'workflow'] as const;

export interface RedisOracle {
  /** `host:pid` of the lease holder per source (undefined: free). */
  holders(): Promise<Record<string, string | undefined>>;
  /** Pages and slice jobs the producers committed (one count per commit). */
  /** Changes queued by the shared stream's commits, over every sink. */
  changesQueued(): Promise<number>;
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
    async changesQueued() {
      return Number((await client.hget(`${tag}:commit-stats`, 'changes')) ?? 0);
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
 * For a suite whose `work` processes are never faulted: every expected change delivered exactly
 * once. A copy can then only come from a page queued twice (a poller's commit landing twice, or a
 * page read again by a standby and queued beside the first), so none is allowed.
 */
export function deliveryProblems(
  delivered: readonly Pick<Change, 'key'>[],
  expectedKeys: readonly string[],
): string[] {
  const problems: string[] = [];
  const count = new Map<string, number>();
  for (const { key } of delivered) count.set(key, (count.get(key) ?? 0) + 1);
  const twice = [...count].filter(([, n]) => n > 1).map(([key]) => key);
  if (twice.length)
    problems.push(`${twice.length} keys delivered more than once, e.g. ${twice.slice(0, 3).join(', ')}`);
  const expected = new Set(expectedKeys);
  const missing = expectedKeys.filter((k) => !count.has(k));
  if (missing.length)
    problems.push(`${missing.length} keys never delivered, e.g. ${missing.slice(0, 3).join(', ')}`);
  const unexpected = [...count.keys()].filter((k) => !expected.has(k));
  if (unexpected.length)
    problems.push(`${unexpected.length} keys no event made, e.g. ${unexpected.slice(0, 3).join(', ')}`);
  return problems;
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
