// The conformance matrix: under every dialect profile of the sandbox, `feedsync run` (a real child
// process, both services, jsonl sink) once with format json and once with format xml. Each cell
// must deliver every event exactly once as a schema-valid change whose subject_state and subject are
// what the sandbox's history says, and the XML run must give the same changes as the JSON run.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Change } from '../../src/core/change.js';
import {
  DIALECT_NAMES,
  startSandbox,
  type DialectName,
  type Sandbox,
  type ServiceName,
} from '../../src/sandbox/index.js';
import { assertValidChange } from '../support/change-schema.js';
import { rawConfig, readJsonl, tempDir } from '../support/harness.js';
import { spawnCli, writeConfig, type CliProcess } from '../support/process.js';

const SERVICES: ServiceName[] = ['scheduling', 'workflow'];
const FORMATS = ['json', 'xml'] as const;
type Format = (typeof FORMATS)[number];
/** Small backlogs keep the whole matrix near a minute on 2 cores; 70 still spans two feed pages. */
const BACKLOG = 70;
/** A cell that has delivered nothing new for this long has stopped (a decoder that rejects a form). */
const STALL_MS = 8_000;
const CELL_MS = 40_000;

interface Cell {
  changes: Change[];
  /** Warnings and errors the run logged, for failure messages. */
  log: string[];
}

async function runCell(sb: Sandbox, format: Format): Promise<Cell> {
  const dir = tempDir(`feedsync-dialect-${format}-`);
  const raw = rawConfig(sb, dir, { source: { format, poll_interval_ms: 100, timeout_ms: 3000 } });
  raw.log = { level: 'warn' };
  const child: CliProcess = spawnCli(['run'], { config: writeConfig(dir, raw) });
  const jsonl = join(dir, 'changes.jsonl');
  const total = SERVICES.reduce((n, s) => n + sb.events(s).length, 0);
  const started = Date.now();
  let changes: Change[] = [];
  let lastGrowth = Date.now();
  try {
    while (Date.now() - started < CELL_MS && child.exit === undefined) {
      const now = readJsonl(jsonl);
      if (now.length !== changes.length) lastGrowth = Date.now();
      changes = now;
      if (new Set(changes.map((c) => c.key)).size >= total) break;
      if (Date.now() - lastGrowth > STALL_MS) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    // A moment more, so that a duplicate delivered after the last new key would be seen too.
    await new Promise((r) => setTimeout(r, 300));
  } finally {
    await child.stop(5000);
  }
  return { changes: readJsonl(jsonl), log: child.stdout().concat(child.stderr()).slice(-8) };
}

function why(cell: Cell): string {
  return cell.log.length > 0 ? `; the run logged:\n${cell.log.join('\n').slice(0, 2000)}` : '';
}

/** Problems grouped by what is wrong (one line per kind, with a count and an example key). */
class Problems {
  private readonly kinds = new Map<string, { n: number; example: string }>();
  add(kind: string, key: string): void {
    const k = this.kinds.get(kind) ?? { n: 0, example: key };
    k.n++;
    this.kinds.set(kind, k);
  }
  list(): string[] {
    return [...this.kinds].map(([kind, { n, example }]) => `${kind} (${n}×, e.g. ${example})`);
  }
}

/** Everything in the changes that differs from the sandbox's history and live state. */
function problemsOf(sb: Sandbox, changes: Change[]): string[] {
  const problems = new Problems();
  const byKey = new Map(changes.map((c) => [c.key, c]));
  for (const service of SERVICES) {
    const live = sb.liveState(service);
    for (const e of sb.events(service)) {
      const c = byKey.get(`${service}:${e.id}`)!;
      try {
        assertValidChange(c);
      } catch (err) {
        problems.add(`schema: ${String(err).replace(/^.*: /, '')}`, c.key);
      }
      const head = {
        event_type: e.event_type,
        occurred_at: e.occurred_at,
        changes: e.changes,
        event_url: e.event_url,
        subject_url: e.subject_url,
        service,
      };
      for (const [k, v] of Object.entries(head)) {
        const d = difference(v, (c as unknown as Record<string, unknown>)[k], k);
        if (d) problems.add(`${service} ${d.path}: expected ${d.a}, got ${d.b}`, c.key);
      }
      const state = e.operation === 'deleted' ? 'deleted' : live[e.subject_url] ? 'present' : 'gone';
      if (c.subject_state !== state) {
        problems.add(`${service} subject_state: expected ${state}, got ${c.subject_state}`, c.key);
        continue;
      }
      if (state !== 'present') continue;
      // Nothing changes while the runs read: what they fetched is the final state. A subject the
      // scheduling feed embeds may lack fields a GET has, but never differs in one.
      const want = live[e.subject_url]!;
      const got: Record<string, unknown> = c.subject ?? {};
      const d =
        service === 'workflow'
          ? difference(want, got, 'subject')
          : Object.keys(got)
              .map((k) => difference(want[k], got[k], `subject.${k}`))
              .find((x) => x !== undefined);
      if (d) problems.add(`${e.resource_type} ${d.path}: expected ${d.a}, got ${d.b}`, c.key);
    }
  }
  return problems.list();
}

/** The first place two JSON values differ, with short descriptions of both sides there. */
function difference(
  a: unknown,
  b: unknown,
  path: string,
): { path: string; a: string; b: string } | undefined {
  if (isObject(a) && isObject(b)) {
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
      const d = difference(a[k], b[k], path ? `${path}.${k}` : k);
      if (d) return d;
    }
    return undefined;
  }
  if (Array.isArray(a) && Array.isArray(b) && a.length === b.length) {
    for (let i = 0; i < a.length; i++) {
      const d = difference(a[i], b[i], `${path}[${i}]`);
      if (d) return d;
    }
    return undefined;
  }
  if (JSON.stringify(a) === JSON.stringify(b)) return undefined;
  return { path: path.replace(/\[\d+\]/g, '[]'), a: summary(a), b: summary(b) };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function summary(v: unknown): string {
  if (v === undefined) return 'absent';
  if (Array.isArray(v)) return 'an array';
  if (isObject(v)) return `an object {${Object.keys(v).slice(0, 4).join(', ')}}`;
  return JSON.stringify(v).slice(0, 60);
}

describe.each(DIALECT_NAMES)('dialect %s', (name: DialectName) => {
  let sb: Sandbox;
  const cells = {} as Record<Format, Cell>;

  beforeAll(async () => {
    sb = await startSandbox({ seed: 23, backlog: BACKLOG, dialect: name });
    const [json, xml] = await Promise.all(FORMATS.map((f) => runCell(sb, f)));
    cells.json = json!;
    cells.xml = xml!;
  }, 2 * CELL_MS);
  afterAll(() => sb?.close());

  it.each(FORMATS)(
    '%s: every event exactly once, schema-valid, subject_state as the history says',
    (format) => {
      const cell = cells[format];
      const expected = SERVICES.flatMap((s) => sb.events(s).map((e) => `${s}:${e.id}`));
      const counts = new Map<string, number>();
      for (const c of cell.changes) counts.set(c.key, (counts.get(c.key) ?? 0) + 1);
      const missing = expected.filter((k) => !counts.has(k));
      expect(
        missing.length,
        `${missing.length} of ${expected.length} keys missing, e.g. ${missing.slice(0, 3).join(', ')}${why(cell)}`,
      ).toBe(0);
      const twice = [...counts].filter(([, n]) => n > 1).map(([k]) => k);
      expect(twice, 'keys delivered more than once').toEqual([]);
      expect(counts.size).toBe(expected.length);
      expect(problemsOf(sb, cell.changes)).toEqual([]);
    },
  );

  it('xml and json runs give deep-equal changes, key by key', () => {
    expect(cells.json.changes.length, `json run delivered nothing${why(cells.json)}`).toBeGreaterThan(0);
    expect(cells.xml.changes.length, `xml run delivered nothing${why(cells.xml)}`).toBeGreaterThan(0);
    const xml = new Map(cells.xml.changes.map((c) => [c.key, c]));
    const json = new Map(cells.json.changes.map((c) => [c.key, c]));
    expect([...xml.keys()].sort()).toEqual([...json.keys()].sort());
    const problems = new Problems();
    for (const [key, c] of json) {
      const d = difference(c, xml.get(key), '');
      if (d) problems.add(`${c.resource_type} ${d.path}: json ${d.a}, xml ${d.b}`, key);
    }
    expect(problems.list()).toEqual([]);
  });
});
