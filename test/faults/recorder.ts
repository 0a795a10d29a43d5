// Collecting the history while a fault run goes on: the recorder sink's files (read
// incrementally), cursor and lease samples (store or Redis, every SAMPLE_MS), and each process's
// feedsync_deliveries_after_lease_loss_total (scraped every second, plus its log lines).
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import { closeSync, existsSync, openSync, readdirSync, readSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { Supervisor } from './supervisor.js';
import type { CursorSample, Delivery, LeaseLossCount, LeaseSample } from './types.js';

export const now = (): number => performance.timeOrigin + performance.now();

interface StartLine {
  e: 's';
  sink: string;
  pid: number;
  key: string;
  subject: string | null;
  id: number;
  src: string;
  t: number;
  fence: { scope: string; token: number } | null;
  valid: boolean | null;
  batch: string | null;
}
interface EndLine {
  e: 'e';
  sink: string;
  pid: number;
  key: string;
  t: number;
  ok: boolean;
  why: string | null;
}

/** Reads the recorder sink's files as they grow; pairs each END with its open START. */
export class DeliveryLog {
  readonly deliveries: Delivery[] = [];
  /** Keys with an ok END, per sink. */
  readonly delivered = new Map<string, Set<string>>();
  private readonly offsets = new Map<string, number>();
  private readonly partial = new Map<string, string>();
  private readonly open = new Map<string, Delivery[]>();

  constructor(private readonly dir: string) {}

  poll(): void {
    if (!existsSync(this.dir)) return;
    for (const name of readdirSync(this.dir)) {
      if (!name.endsWith('.jsonl')) continue;
      const path = join(this.dir, name);
      const size = statSync(path).size;
      const from = this.offsets.get(path) ?? 0;
      if (size <= from) continue;
      const fd = openSync(path, 'r');
      const buf = Buffer.alloc(size - from);
      try {
        readSync(fd, buf, 0, buf.length, from);
      } finally {
        closeSync(fd);
      }
      this.offsets.set(path, size);
      const text = (this.partial.get(path) ?? '') + buf.toString('utf8');
      const lines = text.split('\n');
      this.partial.set(path, lines.pop()!);
      for (const line of lines) this.line(line);
    }
  }

  private line(line: string): void {
    if (!line.trim()) return;
    let v: StartLine | EndLine;
    try {
      v = JSON.parse(line) as StartLine | EndLine;
    } catch {
      return; // a line torn by kill -9
    }
    const k = `${v.sink}\u0000${v.pid}\u0000${v.key}`;
    if (v.e === 's') {
      const d: Delivery = {
        sink: v.sink,
        pid: v.pid,
        key: v.key,
        subject: v.subject,
        id: v.id,
        source: v.src,
        start: v.t,
        fence: v.fence,
        valid: v.valid,
        batch: v.batch,
      };
      this.deliveries.push(d);
      const list = this.open.get(k) ?? [];
      list.push(d);
      this.open.set(k, list);
    } else {
      const d = this.open.get(k)?.shift();
      if (!d) return;
      d.end = v.t;
      d.ok = v.ok;
      d.why = v.why;
      if (v.ok) {
        const set = this.delivered.get(v.sink) ?? new Set<string>();
        set.add(v.key);
        this.delivered.set(v.sink, set);
      }
    }
  }
}

export interface Sampler {
  cursors: CursorSample[];
  leases: LeaseSample[];
  /** Latest cursor per source. */
  latest(source: string): number | undefined;
  /** Latest lease owner of a scope ("*" local, else a source). */
  holder(scope: string): { owner: string | null; token: number | null } | undefined;
  stop(): Promise<void>;
}

const SAMPLE_MS = 150;

/** Local driver: the store's cursors and lease, read through a read-only connection. */
export function sampleStore(storePath: string): Sampler {
  const cursors: CursorSample[] = [];
  const leases: LeaseSample[] = [];
  const last = new Map<string, number>();
  let lastLease: { owner: string | null; token: number | null } | undefined;
  let db: Database.Database | undefined;
  const tick = () => {
    try {
      if (!db) {
        if (!existsSync(storePath)) return;
        db = new Database(storePath, { readonly: true, fileMustExist: true, timeout: 100 });
      }
      if ((db.pragma('user_version', { simple: true }) as number) === 0) return;
      const rows = db.prepare('SELECT source, event_id FROM cursors').all() as {
        source: string;
        event_id: number;
      }[];
      let lease: { owner: string; token: number } | undefined;
      try {
        lease = db.prepare('SELECT owner, token FROM store_lease WHERE id = 1').get() as typeof lease;
      } catch {
        // a build without the store lease
      }
      const t = now();
      for (const r of rows) {
        cursors.push({ source: r.source, t, value: r.event_id });
        last.set(r.source, r.event_id);
      }
      lastLease = { owner: lease?.owner ?? null, token: lease?.token ?? null };
      leases.push({ source: '*', t, ...lastLease });
    } catch {
      // busy, or the file swapped: next time
    }
  };
  const timer = setInterval(tick, SAMPLE_MS);
  return {
    cursors,
    leases,
    latest: (s) => last.get(s),
    holder: () => lastLease,
    async stop() {
      clearInterval(timer);
      tick();
      db?.close();
    },
  };
}

/** BullMQ driver: `{prefix}:source:<name>` cursors and `{prefix}:lease:<name>`, straight from Redis. */
export function sampleRedis(redisUrl: string, prefix: string, sources: string[]): Sampler {
  const cursors: CursorSample[] = [];
  const leases: LeaseSample[] = [];
  const last = new Map<string, number>();
  const lastLease = new Map<string, { owner: string | null; token: number | null }>();
  const client = new Redis(redisUrl, {
    maxRetriesPerRequest: 0,
    commandTimeout: 400,
    enableOfflineQueue: false,
    retryStrategy: () => 200,
    lazyConnect: false,
  });
  client.on('error', () => undefined);
  let busy = false;
  const tag = `{${prefix}}`;
  const tick = async () => {
    if (busy) return;
    busy = true;
    try {
      const pipeline = client.multi();
      for (const s of sources) pipeline.hget(`${tag}:source:${s}`, 'cursor');
      for (const s of sources) pipeline.get(`${tag}:lease:${s}`);
      const res = (await pipeline.exec()) ?? [];
      const t = now();
      sources.forEach((s, i) => {
        const v = res[i]?.[1] as string | null | undefined;
        if (v !== null && v !== undefined) {
          cursors.push({ source: s, t, value: Number(v) });
          last.set(s, Number(v));
        }
        const l = res[sources.length + i]?.[1] as string | null | undefined;
        const space = l ? l.indexOf(' ') : -1;
        const lease = l
          ? { owner: l.slice(space + 1), token: Number(l.slice(0, space)) }
          : { owner: null, token: null };
        lastLease.set(s, lease);
        leases.push({ source: s, t, ...lease });
      });
    } catch {
      // Redis down or frozen: no sample
    } finally {
      busy = false;
    }
  };
  const timer = setInterval(() => void tick(), SAMPLE_MS);
  return {
    cursors,
    leases,
    latest: (s) => last.get(s),
    holder: (s) => lastLease.get(s),
    async stop() {
      clearInterval(timer);
      await tick();
      client.disconnect();
    },
  };
}

const LEASE_LOSS_METRIC = 'feedsync_deliveries_after_lease_loss_total';
/** The warning logged with each increment of that counter (local driver, bullmq workers). */
const LEASE_LOSS_LOG = /finished after another (process took the store|worker took the shard) over/;

/** Scrapes every live process's after-lease-loss counter; the highest value seen per pid and sink is kept. */
export function scrapeLeaseLoss(sup: Supervisor): {
  scrape(): Promise<void>;
  counts(): LeaseLossCount[];
  stop(): void;
} {
  const best = new Map<string, number>();
  const put = (pid: number, sink: string, n: number) => {
    const k = `${pid} ${sink}`;
    if (n > (best.get(k) ?? 0)) best.set(k, n);
  };
  const scrape = async () => {
    await Promise.all(
      sup.metricsPorts().map(async ({ pid, port }) => {
        try {
          const res = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(800) });
          const text = await res.text();
          for (const line of text.split('\n')) {
            if (!line.startsWith(LEASE_LOSS_METRIC)) continue;
            const sink = /sink="([^"]*)"/.exec(line)?.[1];
            const n = Number(line.split(' ').at(-1));
            if (sink && Number.isFinite(n)) put(pid, sink, n);
          }
        } catch {
          // frozen, exiting, or busy
        }
      }),
    );
  };
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    void scrape().finally(() => (running = false));
  }, 1_000);
  return {
    scrape,
    counts() {
      // The same event is logged: the log survives a process that exits before the next scrape.
      const fromLogs = new Map<string, number>();
      for (const { pid, entry } of sup.allLogs()) {
        if (typeof entry.msg !== 'string' || !LEASE_LOSS_LOG.test(entry.msg)) continue;
        const sink = String(entry.sink ?? '');
        const n = Number(entry.keys ?? entry.changes ?? 1);
        const k = `${pid} ${sink}`;
        fromLogs.set(k, (fromLogs.get(k) ?? 0) + n);
      }
      for (const [k, n] of fromLogs) {
        const [pid, sink] = k.split(' ') as [string, string];
        put(Number(pid), sink, n);
      }
      return [...best].map(([k, count]) => {
        const [pid, sink] = k.split(' ') as [string, string];
        return { pid: Number(pid), sink, count };
      });
    },
    stop: () => clearInterval(timer),
  };
}
