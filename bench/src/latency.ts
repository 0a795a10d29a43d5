// Live latency: the sandbox generates events at a steady rate; `feedsync run` (poll_interval_ms
// 1000) delivers them to the latency sink, which records ack time − event timestamp per change.
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { SandboxControl } from './control.js';
import { startFeedsync, writeConfig } from './drain.js';
import type { SandboxInfo } from './procs.js';

export interface LatencyResult {
  ratePerService: number;
  pollIntervalMs: number;
  windowSeconds: number;
  samples: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  peakRssBytes: number;
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

export async function measureLatency(opts: {
  info: SandboxInfo;
  control: SandboxControl;
  dir: string;
  rate: number;
  pollIntervalMs: number;
  warmupSeconds: number;
  windowSeconds: number;
}): Promise<LatencyResult> {
  mkdirSync(opts.dir, { recursive: true });
  const latencyPath = join(opts.dir, 'latency.txt');
  const sinkModule = fileURLToPath(new URL('./latency-sink.js', import.meta.url));
  const drainOpts = {
    mode: 'local' as const,
    services: ['scheduling' as const, 'workflow' as const],
    info: opts.info,
    control: opts.control,
    events: {},
    dir: opts.dir,
    timeoutMs: 0,
    pollIntervalMs: opts.pollIntervalMs,
    extraSinks: [{ name: 'latency', type: 'module', module: sinkModule, options: { path: latencyPath } }],
  };
  const configPath = writeConfig(drainOpts, join(opts.dir, 'changes.jsonl'));
  const [proc] = startFeedsync(drainOpts, configPath);
  const sleep = (s: number) => new Promise((r) => setTimeout(r, s * 1000));
  let peak = 0;
  try {
    await opts.control.setRate(opts.rate);
    await sleep(opts.warmupSeconds);
    // Only deliveries of events that occurred inside the window count.
    const windowStart = Date.now();
    await sleep(opts.windowSeconds);
    const windowEnd = Date.now();
    await opts.control.setRate(0);
    // Long enough for the last events of the window to be polled and delivered.
    await sleep(opts.pollIntervalMs / 1000 + 2);
    peak = proc!.child.peakRss();
    const text = existsSync(latencyPath) ? readFileSync(latencyPath, 'utf8') : '';
    return summarize(text, windowStart, windowEnd, opts, peak);
  } finally {
    await opts.control.setRate(0).catch(() => undefined);
    await proc!.child.stop();
  }
}

function summarize(
  text: string,
  windowStart: number,
  windowEnd: number,
  opts: { rate: number; pollIntervalMs: number; windowSeconds: number },
  peak: number,
): LatencyResult {
  const samples: number[] = [];
  for (const line of text.split('\n')) {
    const [, occurred, ms] = line.split(' ');
    if (ms === undefined) continue;
    const at = Number(occurred);
    if (at >= windowStart && at < windowEnd) samples.push(Number(ms));
  }
  samples.sort((a, b) => a - b);
  return {
    ratePerService: opts.rate,
    pollIntervalMs: opts.pollIntervalMs,
    windowSeconds: opts.windowSeconds,
    samples: samples.length,
    p50Ms: percentile(samples, 50),
    p99Ms: percentile(samples, 99),
    maxMs: samples.at(-1) ?? Number.NaN,
    peakRssBytes: peak,
  };
}
