// `npm run bench:startup`: only the start-up figure of the benchmark, as JSON (seconds, not minutes).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { measureStartup } from './startup.js';

const runs = Math.max(2, Number(process.env.BENCH_STARTUP_RUNS ?? 11));
const work = mkdtempSync(join(tmpdir(), 'feedsync-bench-startup-'));
try {
  process.stdout.write(`${JSON.stringify(await measureStartup(work, runs))}\n`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
