// status, cursor and dlq with the local (SQLite) driver, as child processes next to a real
// `feedsync run` child polling the sandbox: what they report while it runs, what they refuse while
// it holds the sources, and what they do once it has stopped.
import { rmSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { rawConfig, readJsonl, tempDir, waitFor } from '../support/harness.js';
import { killAllCli, runCli, spawnCli, writeConfig, type CliProcess, type CliResult } from './support/cli.js';
import { exerciseDlq, linesOf } from './support/dlq-flow.js';

const BACKLOG = 120;
const EVERY = 7; // the picky sink refuses events whose id is a multiple of this while the flag exists

interface StatusJson {
  sources: {
    source: string;
    cursor: number | null;
    last_event_at: string | null;
    last_successful_poll_at: string | null;
    state: string;
  }[];
  sinks: { sink: string; queued: number; in_flight: number; delayed: number; dead: number }[];
  positions: Record<string, unknown>[];
}

const dir = tempDir('feedsync-ops-local-');
const jsonlPath = join(dir, 'changes.jsonl');
const pickyPath = join(dir, 'picky.txt');
const flag = join(dir, 'refuse');
let sandbox: Sandbox;
let configFile: string;
let daemon: CliProcess;

const cli = (...args: string[]) => runCli(['--config', configFile, ...args]);
const pickyKeys = () => linesOf(pickyPath);
const allKeys = () =>
  (['scheduling', 'workflow'] as const).flatMap((s) => sandbox.events(s).map((e) => `${s}:${e.id}`));
const refusedKeys = () => allKeys().filter((k) => Number(k.split(':')[1]) % EVERY === 0);

beforeAll(async () => {
  sandbox = await startSandbox({ seed: 11, backlog: BACKLOG, rate: 0 });
  writeFileSync(flag, '');
  const raw = rawConfig(sandbox, dir, {
    queue: { attempts: 2, backoff_ms: 20, max_backoff_ms: 100 },
    sinks: [
      { name: 'file', type: 'jsonl', path: jsonlPath },
      {
        name: 'picky',
        type: 'module',
        module: resolve(import.meta.dirname, 'support/refusing-sink.mjs'),
        options: { path: pickyPath, refuse_flag: flag, every: EVERY },
      },
    ],
  });
  raw.log = { level: 'info' };
  configFile = writeConfig(dir, raw);
  daemon = spawnCli(['--config', configFile, 'run']);
  const expected = 2 * BACKLOG;
  await waitFor(
    () => readJsonl(jsonlPath).length >= expected && pickyKeys().length >= expected - refusedKeys().length,
    30_000,
    `the run child to deliver ${expected} changes`,
  );
});

afterAll(async () => {
  await daemon?.stop();
  await killAllCli();
  await sandbox?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('while `feedsync run` is running', () => {
  // Read-only commands, started together (each child costs a Node start-up).
  let readOnly: Promise<CliResult[]>;
  beforeAll(() => {
    readOnly = Promise.all([cli('status', '--json'), cli('status'), cli('cursor', 'show')]);
  });

  it('status --json reports each source cursor, last event, last ok poll and state, and each sink', async () => {
    const [r] = await readOnly;
    expect(r.code, r.stderr).toBe(0);
    const status = JSON.parse(r.stdout) as StatusJson;
    for (const service of ['scheduling', 'workflow'] as const) {
      const events = sandbox.events(service);
      const s = status.sources.find((x) => x.source === service)!;
      expect(s.cursor).toBe(Math.max(...events.map((e) => e.id)));
      expect(s.state).toBe('caught up');
      const newest = Math.max(...events.map((e) => Date.parse(e.occurred_at)));
      expect(Date.parse(s.last_event_at!)).toBe(newest);
      expect(Date.now() - Date.parse(s.last_successful_poll_at!)).toBeLessThan(10_000);
    }
    const file = status.sinks.find((s) => s.sink === 'file')!;
    expect(file).toMatchObject({ queued: 0, in_flight: 0, delayed: 0, dead: 0 });
    const picky = status.sinks.find((s) => s.sink === 'picky')!;
    expect(picky.dead).toBe(refusedKeys().length);
    expect(picky.dead).toBeGreaterThan(0);
    // Both sinks kept up: live on both sources, at the source's cursor (dead letters are no lag).
    expect(status.positions).toEqual(
      (['scheduling', 'workflow'] as const).flatMap((source) =>
        ['file', 'picky'].map((sink) => ({
          source,
          sink,
          state: 'live',
          position: status.sources.find((x) => x.source === source)!.cursor,
          lag_events: 0,
          lag_seconds: null,
          queued: 0,
          reason: null,
          since: null,
          pending_ids: 0,
          ids_truncated: false,
          lost_upstream: null,
        })),
      ),
    );
  });

  it('status (text) shows a table per source and per sink', async () => {
    const [, r] = await readOnly;
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^scheduling\s+\d+\s+caught up/m);
    expect(r.stdout).toMatch(/^workflow\s+\d+\s+caught up/m);
    expect(r.stdout).toMatch(new RegExp(`^picky\\s+0\\s+0\\s+0\\s+0\\s+${refusedKeys().length}$`, 'm'));
    expect(r.stdout).toMatch(/^SINK\s+SOURCE\s+STATE\s+POSITION\s+LAG\s+QUEUED$/m);
    expect(r.stdout).toMatch(/^picky\s+workflow\s+live\s+\d+\s+0 events\s+0$/m);
  });

  it('cursor show prints every source with its cursor', async () => {
    const [, , r] = await readOnly;
    expect(r.code, r.stderr).toBe(0);
    const max = (s: 'scheduling' | 'workflow') => Math.max(...sandbox.events(s).map((e) => e.id));
    expect(r.stdout).toContain(`scheduling\t${max('scheduling')}`);
    expect(r.stdout).toContain(`workflow\t${max('workflow')}`);
  });

  it('cursor set / reset refuse with exit 1 naming the holder; an unknown source is exit 2', async () => {
    const [set, reset, latest, unknown] = await Promise.all([
      cli('cursor', 'set', 'scheduling', '5'),
      cli('cursor', 'reset', 'workflow', '--to', 'earliest'),
      cli('cursor', 'reset', 'scheduling', '--to', 'latest'),
      cli('cursor', 'set', 'nosuch', '5'),
    ]);
    const holder = `${hostname()}:${daemon.pid}`;
    for (const r of [set, reset, latest]) {
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(holder);
      expect(r.stderr).toMatch(/refusing/);
    }
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/unknown source "nosuch"/);
    const show = await cli('cursor', 'show');
    expect(show.stdout).not.toMatch(/^scheduling\t5$/m);
  });

  it('dlq list / drop / retry: dropped letters are gone, retried ones reach the sink once fixed', async () => {
    await exerciseDlq({ cli, refused: refusedKeys(), pickyPath, flag });
    // The jsonl sink was never involved: it still has exactly one line per event.
    expect(new Set(readJsonl(jsonlPath).map((c) => c.key)).size).toBe(allKeys().length);
  });
});

describe('after `feedsync run` stopped', () => {
  beforeAll(async () => {
    expect((await daemon.stop()).code).toBe(0);
  });

  it('cursor set moves the cursor; reset --to latest asks the sandbox; --to earliest is 0', async () => {
    const set = await cli('cursor', 'set', 'scheduling', '5');
    expect(set.code, set.stderr).toBe(0);
    expect(set.stdout).toMatch(/^scheduling: cursor \d+ → 5$/m);
    expect((await cli('cursor', 'show')).stdout).toMatch(/^scheduling\t5$/m);

    sandbox.generate('workflow', 3); // newer than anything the daemon saw
    const latest = await cli('cursor', 'reset', 'workflow', '--to', 'latest');
    expect(latest.code, latest.stderr).toBe(0);
    const newest = Math.max(...sandbox.events('workflow').map((e) => e.id));
    expect(latest.stdout).toMatch(new RegExp(`^workflow: cursor \\d+ → ${newest}$`, 'm'));

    const earliest = await cli('cursor', 'reset', 'scheduling', '--to', 'earliest');
    expect(earliest.code, earliest.stderr).toBe(0);
    expect(earliest.stdout).toMatch(/^scheduling: cursor 5 → 0$/m);

    const status = JSON.parse((await cli('status', '--json')).stdout) as StatusJson;
    expect(status.sources.map((s) => [s.source, s.cursor])).toEqual([
      ['scheduling', 0],
      ['workflow', newest],
    ]);
  });

  it('an unknown source is still exit 2, and a non-numeric id is exit 2', async () => {
    const [unknown, badId] = await Promise.all([
      cli('cursor', 'reset', 'nosuch', '--to', 'latest'),
      cli('cursor', 'set', 'scheduling', 'abc'),
    ]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('nosuch');
    expect(badId.code).toBe(2);
    expect(badId.stderr).toContain('"abc"');
  });
});
