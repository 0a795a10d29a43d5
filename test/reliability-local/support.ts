// Shared pieces of the local-driver reliability suites: a config for a `feedsync run` child against
// an in-process sandbox (jsonl + sqlite mirror sinks), the oracles (every sandbox event delivered,
// mirror equals the sandbox's live state, cursor never ahead of the queue) and a seeded generator.
import { queuedKeys } from '../support/queued-keys.js';
import { Rng } from '../../src/sandbox/prng.js';
import Database from 'better-sqlite3';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Change } from '../../src/core/change.js';
import type { Sandbox, ServiceName } from '../../src/sandbox/index.js';
import type { Resource } from '../../src/core/resource.js';
import { rawConfig, readJsonl, waitFor, type SourceOverrides } from '../support/harness.js';
import { spawnCli, writeConfig, type CliProcess } from '../support/process.js';

export const SERVICES: ServiceName[] = ['scheduling', 'workflow'];

/**
 * The seed of every random choice in this directory; `RELIABILITY_SEED=<n>` replays a run. Each
 * test prints it in its failure messages.
 */
export const SEED = Number(process.env.RELIABILITY_SEED ?? Math.floor(Math.random() * 2 ** 31));

/** mulberry32: small, fast, good enough to place kills at reproducible moments. */
export function seededRandom(seed: number): () => number {
  const rng = new Rng(seed);
  return () => rng.next();
}

export interface RunFiles {
  dir: string;
  configPath: string;
  storePath: string;
  jsonlPath: string;
  mirrorPath: string;
}

/**
 * Writes the YAML config of a `feedsync run` against both sandbox services: scheduling as JSON,
 * workflow as XML (both decoders exercised), sinks jsonl `file` and sqlite `mirror`. Logs are
 * JSON lines at info level on stdout so tests can wait for them.
 */
export function writeRunConfig(
  sandbox: Sandbox,
  dir: string,
  opts: {
    source?: SourceOverrides;
    shutdownTimeoutMs?: number;
    concurrency?: number;
    queue?: Record<string, unknown>;
  } = {},
): RunFiles {
  const files = {
    dir,
    storePath: join(dir, 'feedsync.db'),
    jsonlPath: join(dir, 'changes.jsonl'),
    mirrorPath: join(dir, 'mirror.db'),
  };
  const raw = rawConfig(sandbox, dir, {
    source: { poll_interval_ms: 100, timeout_ms: 2000, ...opts.source },
    sinks: [
      { name: 'file', type: 'jsonl', path: files.jsonlPath },
      { name: 'mirror', type: 'sqlite', path: files.mirrorPath },
    ],
    queue: { concurrency: opts.concurrency ?? 4, ...opts.queue },
  });
  const sources = raw.sources as Record<string, unknown>[];
  sources[1]!.format = 'xml';
  raw.shutdown_timeout_ms = opts.shutdownTimeoutMs ?? 5000;
  raw.log = { level: 'info' };
  return { ...files, configPath: writeConfig(dir, raw) };
}

/** `RELIABILITY_ECHO=1` echoes every child's output to stderr (debugging a failed run). */
export const echoPrefix = (name: string) => (process.env.RELIABILITY_ECHO ? `[${name}]` : undefined);

/** Starts `feedsync run` and waits for its "feedsync started" log line. */
export async function startRun(files: Pick<RunFiles, 'configPath'>, timeoutMs = 15_000): Promise<CliProcess> {
  const p = spawnCli(['run'], { config: files.configPath, echo: echoPrefix('run') });
  await p.waitForLog((l) => l.msg === 'feedsync started', timeoutMs, '"feedsync started"');
  return p;
}

/** Every change key the sandbox produced so far (source names equal service names). */
export function sandboxKeys(sandbox: Sandbox): Set<string> {
  const keys = new Set<string>();
  for (const service of SERVICES) for (const e of sandbox.events(service)) keys.add(`${service}:${e.id}`);
  return keys;
}

export function countKeys(changes: Change[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const c of changes) counts.set(c.key, (counts.get(c.key) ?? 0) + 1);
  return counts;
}

export function missingKeys(expected: Iterable<string>, got: Map<string, number> | Set<string>): string[] {
  return [...expected].filter((k) => !got.has(k));
}

/** Waits until the jsonl holds every key in `expected`; the error lists a few missing ones. */
export async function waitForAllKeys(
  jsonlPath: string,
  expected: Set<string>,
  timeoutMs: number,
  context: string,
): Promise<Change[]> {
  let changes: Change[] = [];
  try {
    await waitFor(
      () => {
        changes = readJsonl(jsonlPath);
        return missingKeys(expected, countKeys(changes)).length === 0;
      },
      timeoutMs,
      `all ${expected.size} keys in ${jsonlPath}`,
    );
  } catch (err) {
    const missing = missingKeys(expected, countKeys(changes));
    throw new Error(
      `${(err as Error).message} (${context}); ${missing.length} missing, e.g. ${missing.slice(0, 10).join(', ')}`,
    );
  }
  return changes;
}

/** The stored cursor per source (read-only; safe while a process runs thanks to WAL). */
export function readCursors(storePath: string): Map<string, number> {
  const db = new Database(storePath, { readonly: true, fileMustExist: true });
  try {
    const rows = db.prepare('SELECT source, event_id FROM cursors').all() as {
      source: string;
      event_id: number;
    }[];
    return new Map(rows.map((r) => [r.source, r.event_id]));
  } finally {
    db.close();
  }
}

/**
 * One consistent snapshot of the store: cursors and every key still queued or dead-lettered.
 * Read BEFORE the jsonl: a row leaves `deliveries` only after its line was written, so a key that
 * is neither in the snapshot's queue nor in a later read of the jsonl was never queued.
 */
export function storeSnapshot(storePath: string): { cursors: Map<string, number>; queued: Set<string> } {
  const db = new Database(storePath, { readonly: true, fileMustExist: true });
  try {
    return db.transaction(() => {
      // The file exists before the daemon's migrations commit: no schema yet, nothing stored yet.
      if ((db.pragma('user_version', { simple: true }) as number) === 0)
        return { cursors: new Map<string, number>(), queued: new Set<string>() };
      const cursors = new Map(
        (
          db.prepare('SELECT source, event_id FROM cursors').all() as { source: string; event_id: number }[]
        ).map((r) => [r.source, r.event_id]),
      );
      const queued = queuedKeys(db, 'file');
      return { cursors, queued };
    })();
  } finally {
    db.close();
  }
}

/** Keys of sandbox events at or below each source's cursor that are neither queued nor delivered. */
export function keysBehindCursorNotQueued(sandbox: Sandbox, files: RunFiles): string[] {
  if (!existsSync(files.storePath)) return [];
  const { cursors, queued } = storeSnapshot(files.storePath);
  const delivered = countKeys(readJsonl(files.jsonlPath));
  const lost: string[] = [];
  for (const service of SERVICES) {
    const cursor = cursors.get(service);
    if (cursor === undefined) continue;
    for (const e of sandbox.events(service)) {
      const key = `${service}:${e.id}`;
      if (e.id <= cursor && !queued.has(key) && !delivered.has(key)) lost.push(key);
    }
  }
  return lost;
}

/**
 * Ages the store lease of a process killed with -9 as if STORE_LEASE_TTL_MS (15 s) had passed, so
 * a restart takes over at once instead of waiting out the lease on every kill. Only that pid's row
 * is touched; the takeover itself still goes through the normal expired-lease claim. Waiting out
 * a real lease is covered by source-lock.test.ts.
 */
export function expireLocksOf(storePath: string, pid: number): number {
  const db = new Database(storePath, { fileMustExist: true, timeout: 5000 });
  try {
    return db.prepare('UPDATE store_lease SET heartbeat_at = 0 WHERE owner LIKE ?').run(`%:${pid}`).changes;
  } finally {
    db.close();
  }
}

export interface MirrorRow {
  subject_url: string;
  subject: Record<string, unknown>;
  last_event_id: number;
}

export function readMirrorLive(mirrorPath: string): Map<string, MirrorRow> {
  const db = new Database(mirrorPath, { readonly: true, fileMustExist: true });
  try {
    const rows = db.prepare('SELECT subject_url, subject, last_event_id FROM live_subjects').all() as {
      subject_url: string;
      subject: string | null;
      last_event_id: number;
    }[];
    return new Map(
      rows.map((r) => [
        r.subject_url,
        {
          subject_url: r.subject_url,
          subject: JSON.parse(r.subject ?? 'null') as Record<string, unknown>,
          last_event_id: r.last_event_id,
        },
      ]),
    );
  } finally {
    db.close();
  }
}

/**
 * Differences between the mirror's live rows and the sandbox's live state, as readable lines.
 * Workflow subjects are fetched by GET: exact equality. Scheduling subjects are embedded by the
 * feed, which may carry fewer fields than a GET: every field the mirror has must equal the GET's.
 */
export function mirrorDifferences(sandbox: Sandbox, mirrorPath: string): string[] {
  return liveStateDifferences(sandbox, readMirrorLive(mirrorPath));
}

/** The comparison of mirrorDifferences over any mirror's live rows (the sqlite one, the postgres one). */
export function liveStateDifferences(
  sandbox: Sandbox,
  mirror: ReadonlyMap<string, { subject: Record<string, unknown> }>,
): string[] {
  const diffs: string[] = [];
  const live = new Map<string, { service: ServiceName; resource: Resource }>();
  for (const service of SERVICES)
    for (const [url, resource] of Object.entries(sandbox.liveState(service)))
      live.set(url, { service, resource });
  for (const [url, { service, resource }] of live) {
    const row = mirror.get(url);
    if (!row) {
      diffs.push(`missing live subject ${url}`);
      continue;
    }
    const want = resource as Record<string, unknown>;
    if (service === 'workflow') {
      if (!deepEqual(row.subject, want))
        diffs.push(`${url}: mirror ${JSON.stringify(row.subject)} != sandbox ${JSON.stringify(want)}`);
    } else {
      for (const [field, value] of Object.entries(row.subject)) {
        if (!deepEqual(value, want[field]))
          diffs.push(
            `${url}.${field}: mirror ${JSON.stringify(value)} != sandbox ${JSON.stringify(want[field])}`,
          );
      }
    }
  }
  for (const url of mirror.keys())
    if (!live.has(url)) diffs.push(`mirror has ${url} live; the sandbox does not`);
  return diffs;
}

export function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => deepEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
