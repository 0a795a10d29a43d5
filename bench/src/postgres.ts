// A private PostgreSQL for the postgres-sink drains (the bench is built on its own and cannot import
// test/support/postgres.ts; this is the part it needs), and the check that a drain is complete: the
// mirror holds, for every subject of the backlog, the change newest by feed position.
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import type { SandboxEvent } from '../../dist/sandbox/types.js';

export interface BenchPostgres {
  url: string;
  /** PostgreSQL's version line, for the report. */
  version: string;
  stop(): Promise<void>;
}

function findBinary(name: string): string {
  const root = '/usr/lib/postgresql';
  if (existsSync(root))
    for (const v of readdirSync(root).sort((a, b) => Number(b) - Number(a)))
      if (existsSync(join(root, v, 'bin', name))) return join(root, v, 'bin', name);
  for (const dir of (process.env.PATH ?? '').split(':'))
    if (dir && existsSync(join(dir, name))) return join(dir, name);
  throw new Error(`${name} not found (apt-get install -y postgresql): needed for the postgres sink drains`);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const a = srv.address();
      const port = typeof a === 'object' && a ? a.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/**
 * initdb + pg_ctl start on a free loopback port, as `postgres` when run as root. Durable defaults
 * (fsync, synchronous_commit on): a commit the sink waits for is on disk, as in production.
 */
export async function startBenchPostgres(): Promise<BenchPostgres> {
  const initdb = findBinary('initdb');
  const pgCtl = findBinary('pg_ctl');
  const asRoot = process.getuid?.() === 0;
  const dir = mkdtempSync(join(tmpdir(), 'feedsync-bench-pg-'));
  const data = join(dir, 'data');
  const run = (bin: string, args: string[]): string =>
    execFileSync(asRoot ? 'runuser' : bin, asRoot ? ['-u', 'postgres', '--', bin, ...args] : args, {
      encoding: 'utf8',
      env: { ...process.env, LC_ALL: 'C' },
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 120_000,
    });
  if (asRoot) execFileSync('chown', ['postgres:postgres', dir]);
  chmodSync(dir, 0o700);
  run(initdb, ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--locale=C']);
  const port = await freePort();
  run(pgCtl, [
    ...['start', '-D', data, '-l', join(dir, 'server.log'), '-w', '-t', '60'],
    ...['-o', `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1`],
  ]);
  const kill = (): void => {
    try {
      run(pgCtl, ['stop', '-D', data, '-m', 'immediate']);
    } catch {
      // already down
    }
  };
  process.once('exit', kill);
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const version = ((await client.query('SELECT version() AS v')).rows[0] as { v: string }).v;
  await client.end();
  return {
    url,
    version,
    async stop() {
      process.removeListener('exit', kill);
      try {
        run(pgCtl, ['stop', '-D', data, '-m', 'fast', '-w']);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}

/**
 * Follows a postgres mirror until it holds, for every subject of `events`, the change newest by
 * position in its feed (scheduling: id; workflow: timestamp, then id) among those that write a row:
 * every subject of a backlog ends with a row (a deleted one as the tombstone of its deletion). Polled with one aggregate (row count and the sum
 * of last_event_id); the exact comparison, row by row, runs once at the end (`verify`).
 */
export class PgMirrorProgress {
  private readonly expected = new Map<string, number>();
  private readonly expectedSum: bigint;
  private readonly client: pg.Client;
  private connected = false;
  /** Rows in the mirror at the last poll. */
  lines = 0;
  missingCount: number;

  constructor(
    url: string,
    private readonly schema: string,
    events: SandboxEvent[],
  ) {
    // A subject deleted by the end of the backlog is fetched only after its deletion: its other
    // changes are `gone` (they write nothing) and its row is the tombstone of its *_deleted change.
    const deleted = new Set(events.filter((e) => e.operation === 'deleted').map((e) => e.subject_url));
    const newest = new Map<string, SandboxEvent>();
    for (const e of events) {
      if (deleted.has(e.subject_url) && e.operation !== 'deleted') continue;
      const held = newest.get(e.subject_url);
      const later =
        !held ||
        (e.service === 'workflow' && e.occurred_at !== held.occurred_at
          ? e.occurred_at > held.occurred_at
          : e.id > held.id);
      if (later) newest.set(e.subject_url, e);
    }
    for (const [url, e] of newest) this.expected.set(url, e.id);
    this.expectedSum = [...this.expected.values()].reduce((a, id) => a + BigInt(id), 0n);
    this.missingCount = this.expected.size;
    this.client = new pg.Client({ connectionString: url });
  }

  /** Returns how many subjects are (probably) not at their final change yet. */
  async poll(): Promise<number> {
    if (!this.connected) {
      await this.client.connect();
      this.connected = true;
    }
    const exists = await this.client.query('SELECT to_regclass($1) AS t', [`${this.schema}.subjects`]);
    if ((exists.rows[0] as { t: string | null }).t === null) return this.missingCount;
    const r = (
      await this.client.query(
        `SELECT count(*)::int AS n, coalesce(sum(last_event_id), 0)::text AS s FROM ${this.schema}.subjects`,
      )
    ).rows[0] as { n: number; s: string };
    this.lines = r.n;
    const done = r.n === this.expected.size && BigInt(r.s) === this.expectedSum;
    this.missingCount = done ? 0 : Math.max(1, this.expected.size - r.n);
    return this.missingCount;
  }

  /** Subjects whose row does not hold their newest change (exact, row by row). */
  async verify(): Promise<number> {
    const rows = (
      await this.client.query(`SELECT subject_url, last_event_id::float8 AS id FROM ${this.schema}.subjects`)
    ).rows as { subject_url: string; id: number }[];
    const got = new Map(rows.map((r) => [r.subject_url, r.id]));
    let missing = 0;
    for (const [url, id] of this.expected) if (got.get(url) !== id) missing++;
    this.missingCount = missing;
    return missing;
  }

  async close(): Promise<void> {
    if (this.connected) await this.client.end();
    this.connected = false;
  }
}
