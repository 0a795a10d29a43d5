import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { validateConfig } from '../config/load.js';
import { startDaemon } from '../daemon.js';
import { createLogger } from '../observability/logger.js';
import { PipelineEvents } from '../core/events.js';
import { startSandbox } from '../sandbox/index.js';
import { handleShutdownSignals } from '../signals.js';
import { version } from '../version.js';

export interface DemoOptions {
  backlog: number;
  rate: number;
  seed: number;
  duration?: number;
  dir?: string;
  /** `--log-level`; the demo's own default is warn, so its progress lines stay readable. */
  logLevel?: string;
}

/**
 * `feedsync demo`: the sandbox plus `run` against it on embedded defaults (local queue, no Redis,
 * no credentials to find), a jsonl file and a SQLite mirror, and one progress line per second.
 */
export async function demoCommand(opts: DemoOptions, out: (s: string) => void): Promise<void> {
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'feedsync-demo-'));
  const sandbox = await startSandbox({ backlog: opts.backlog, rate: opts.rate, seed: opts.seed });
  const source = (name: string, service: string, base: string, format: string) => ({
    name,
    service,
    base_url: base,
    username: sandbox.username,
    password: sandbox.password,
    format,
    start_from: 'earliest',
    poll_interval_ms: 1000,
  });
  const config = validateConfig(
    {
      store: { path: join(dir, 'feedsync.db') },
      sources: [
        source('scheduling', 'scheduling', sandbox.schedulingBaseUrl, 'json'),
        source('workflow', 'workflow', sandbox.workflowBaseUrl, 'xml'),
      ],
      sinks: [
        { name: 'file', type: 'jsonl', path: join(dir, 'changes.jsonl') },
        { name: 'mirror', type: 'sqlite', path: join(dir, 'mirror.db') },
      ],
      http: { host: '127.0.0.1', port: 0 },
      log: { level: opts.logLevel ?? 'warn' },
    },
    { dir },
  );
  const logger = createLogger({
    level: config.log.level,
    pretty: process.stderr.isTTY === true,
    destination: 2,
  });
  const events = new PipelineEvents();
  const progress = trackProgress(
    events,
    config.sources.map((s) => s.name),
    config.sinks.map((s) => s.name),
  );
  const daemon = await startDaemon({ config, configDir: dir, mode: 'run', logger, version, events });

  out(`feedsync demo: sandbox at ${sandbox.schedulingBaseUrl} and ${sandbox.workflowBaseUrl}`);
  out(`  changes → ${join(dir, 'changes.jsonl')}   mirror → ${join(dir, 'mirror.db')}`);
  out(`  metrics → http://127.0.0.1:${daemon.metricsPort}/metrics   (Ctrl-C to stop)`);
  const ticker = setInterval(() => out(progress.line()), 1000);

  const stop = async () => {
    clearInterval(ticker);
    await daemon.stop();
    await sandbox.close();
    out(progress.line());
    out(`stopped; output kept in ${dir}`);
  };
  if (opts.duration !== undefined) {
    await new Promise((r) => setTimeout(r, opts.duration! * 1000));
    await stop();
    return;
  }
  handleShutdownSignals(stop, logger);
}

function trackProgress(events: PipelineEvents, sources: string[], sinks: string[]) {
  const state = new Map(
    sources.map((s) => [s, { cursor: 0, events: 0, lastEvents: 0, behind: false, errors: 0 }]),
  );
  const sinkState = new Map(sinks.map((s) => [s, { ok: 0, failed: 0, dead: 0 }]));
  events.on('page:committed', (e) => {
    const s = state.get(e.source)!;
    s.cursor = e.cursor;
    s.events += e.eventTypes.length;
  });
  events.on('poll:finished', (e) => {
    const s = state.get(e.source)!;
    if (e.ok) s.behind = e.behind;
    else s.errors++;
  });
  events.on('delivery:finished', (e) => {
    const s = sinkState.get(e.sink)!;
    if (e.outcome === 'ok') s.ok += e.changes.length;
    else if (e.outcome === 'retry') s.failed += e.changes.length;
    else s.dead += e.changes.length;
  });
  return {
    line(): string {
      const parts = [...state].map(([name, s]) => {
        const rate = s.events - s.lastEvents;
        s.lastEvents = s.events;
        return `${name}: cursor ${s.cursor} ${rate} ev/s ${s.behind ? 'behind' : 'caught up'}${s.errors ? ` (${s.errors} poll errors)` : ''}`;
      });
      const sinkParts = [...sinkState].map(
        ([name, s]) =>
          `${name}: ${s.ok} delivered${s.failed ? `, ${s.failed} retries` : ''}${s.dead ? `, ${s.dead} dead` : ''}`,
      );
      return `${new Date().toISOString().slice(11, 19)}  ${parts.join(' | ')}  ||  ${sinkParts.join(' | ')}`;
    },
  };
}
