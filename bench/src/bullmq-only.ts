// `node bench/dist/bullmq-only.js` (after `npm run build && tsc -p bench`): only the bullmq drains of
// the benchmark (poll + 2 × work on one Redis), per service, BENCH_REPEATS times each (the median by
// CPU per event). With FEEDSYNC_BENCH_CLI naming another build's dist/cli.js it measures that build
// the same way: two runs, one per build, compare a change to the scaled mode in minutes.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ServiceName } from '../../dist/sandbox/types.js';
import { SandboxControl } from './control.js';
import { runDrain, type DrainResult } from './drain.js';
import { startSandboxProcess } from './procs.js';
import { startBenchRedis } from './redis.js';

const SERVICES: ServiceName[] = ['scheduling', 'workflow'];
const backlog = Number(process.env.BENCH_BACKLOG ?? 20_000);
const repeats = Math.max(1, Number(process.env.BENCH_REPEATS ?? 3));
const log = (msg: string) =>
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);

const work = mkdtempSync(join(tmpdir(), 'feedsync-bench-bullmq-only-'));
const { child, info } = await startSandboxProcess({
  backlog,
  rate: 0,
  seed: Number(process.env.BENCH_SEED ?? 1),
});
const redis = await startBenchRedis();
const medians: DrainResult[] = [];
try {
  const control = new SandboxControl(info.control_url);
  const events = Object.fromEntries(
    await Promise.all(SERVICES.map(async (s) => [s, await control.events(s)])),
  );
  for (const service of SERVICES) {
    const runs: DrainResult[] = [];
    for (let i = 0; i < repeats; i++) {
      log(`drain bullmq ${service} ${i + 1}/${repeats}`);
      runs.push(
        await runDrain({
          mode: 'bullmq',
          services: [service],
          info,
          control,
          events,
          dir: join(work, `bullmq-${service}-${i}`),
          timeoutMs: 240_000,
          pollIntervalMs: 1000,
          redisUrl: redis.url,
        }),
      );
    }
    const byCpu = [...runs].sort((a, b) => (a.cpuUsPerEvent ?? Infinity) - (b.cpuUsPerEvent ?? Infinity));
    medians.push(byCpu[Math.floor((byCpu.length - 1) / 2)]!);
  }
} finally {
  await redis.stop();
  await child.stop();
  rmSync(work, { recursive: true, force: true });
}
process.stdout.write(`cli: ${process.env.FEEDSYNC_BENCH_CLI ?? 'dist/cli.js'}\n`);
for (const d of medians)
  for (const s of d.perService)
    process.stdout.write(
      `bullmq ${s.service.padEnd(10)} ${s.events} events in ${d.seconds.toFixed(1)} s: ` +
        `${(s.events / d.seconds).toFixed(0)} events/s, ${(d.cpuUsPerEvent ?? NaN).toFixed(0)} µs CPU/event` +
        `${d.complete ? '' : ' INCOMPLETE'}\n`,
    );
