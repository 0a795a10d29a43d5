// Wall time of `feedsync status` on a store holding many queued changes. The store is filled
// in-process through the built product's local driver (much faster than draining a sandbox), then
// `feedsync status` runs as its own process, as an operator would run it.
// Shared by `npm run bench` (compiled by tsc) and bench/cpu.ts (run type-stripped by Node 24), so
// it imports nothing relative at run time: paths come in as arguments and the product is loaded
// from `dist` by dynamic import.
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

export interface StatusTimeResult {
  queued: number;
  /** Wall ms of each timed run, in run order. */
  status_wall_ms: number[];
  best_ms: number;
}

/** Fills a store in `dir` with `count` changes queued for one jsonl sink, then times `runs` × `feedsync status`. */
export async function statusTime(opts: {
  count: number;
  /** The built product (its cli.js and modules). */
  dist: string;
  /** An empty scratch directory for the store and config. */
  dir: string;
  runs?: number;
}): Promise<StatusTimeResult> {
  const { count, dist, dir, runs = 3 } = opts;
  const load = (path: string) => import(pathToFileURL(join(dist, path)).href);
  const raw = {
    store: { path: join(dir, 'feedsync.db') },
    sources: [
      {
        name: 'scheduling',
        service: 'scheduling',
        base_url: 'http://127.0.0.1:9',
        username: 'u',
        password: 'p',
      },
    ],
    sinks: [{ name: 'file', type: 'jsonl', path: join(dir, 'changes.jsonl') }],
    http: { host: '127.0.0.1', port: 0 },
  };
  writeFileSync(join(dir, 'feedsync.json'), JSON.stringify(raw));
  const { validateConfig } = await load('config/load.js');
  const { createLocalDriver } = await load('queue/local/index.js');
  const { PipelineEvents } = await load('core/events.js');
  const pino = (await import('pino')).default;
  const config = validateConfig(raw, { dir });
  const driver = await createLocalDriver({
    config,
    mode: 'run',
    sinks: [],
    events: new PipelineEvents(),
    logger: pino({ level: 'silent' }),
  });
  // A realistic change size (a ~400-byte subject), so the store's pages are what status reads.
  const subject = { resource_type: 'job', id: 1, state: 'done', note: 'x'.repeat(400) };
  for (let i = 0; i < count; i += 50) {
    const changes = Array.from({ length: Math.min(50, count - i) }, (_, j) => {
      const id = i + j + 1;
      return {
        schema: 'feedsync.change.v1',
        key: `scheduling:${id}`,
        source: 'scheduling',
        service: 'scheduling',
        event_id: id,
        event_type: 'job_updated',
        resource_type: 'job',
        operation: 'updated',
        occurred_at: new Date(1_700_000_000_000 + id).toISOString(),
        changes: ['state'],
        event_url: `http://127.0.0.1:9/api/events/${id}`,
        subject_url: `http://127.0.0.1:9/api/jobs/${id % 997}`,
        subject_state: 'present',
        subject: { ...subject, id: id % 997 },
        source_rule: null,
      };
    });
    await driver.producer.commitPage({ source: 'scheduling', changes, cursor: i + 50, seenAbove: [] });
  }
  await driver.close();
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    const r = spawnSync(process.execPath, [
      join(dist, 'cli.js'),
      'status',
      '--config',
      join(dir, 'feedsync.json'),
    ]);
    if (r.status !== 0) throw new Error(`feedsync status failed: ${r.stderr.toString()}`);
    times.push(performance.now() - t);
  }
  return {
    queued: count,
    status_wall_ms: times.map((t) => Math.round(t)),
    best_ms: Math.round(Math.min(...times)),
  };
}
