// `node bench/dist/postgres-only.js` (after `npm run build && tsc -p bench`): only the postgres sink
// figure of the benchmark — per service, the local drain into the jsonl sink and the same drain into
// a postgres sink, BENCH_REPEATS times each (the median by CPU per event), and their ratio. Seconds
// instead of the full bench's minutes; `npm run bench` measures the same drains among the others.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ServiceName } from '../../dist/sandbox/types.js';
import { SandboxControl } from './control.js';
import { runDrain, type DrainMode, type DrainResult } from './drain.js';
import { startBenchPostgres } from './postgres.js';
import { startSandboxProcess } from './procs.js';
import { drainRows } from './report.js';

const SERVICES: ServiceName[] = ['scheduling', 'workflow'];
const backlog = Number(process.env.BENCH_BACKLOG ?? 50_000);
const repeats = Math.max(1, Number(process.env.BENCH_REPEATS ?? 3));
const log = (msg: string) =>
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);

const work = mkdtempSync(join(tmpdir(), 'feedsync-bench-pg-only-'));
const { child, info } = await startSandboxProcess({
  backlog,
  rate: 0,
  seed: Number(process.env.BENCH_SEED ?? 1),
});
const postgres = await startBenchPostgres();
const drains: DrainResult[] = [];
try {
  const control = new SandboxControl(info.control_url);
  const events = Object.fromEntries(
    await Promise.all(SERVICES.map(async (s) => [s, await control.events(s)])),
  );
  for (const service of SERVICES)
    for (const mode of ['local', 'postgres'] as DrainMode[]) {
      const runs: DrainResult[] = [];
      for (let i = 0; i < repeats; i++) {
        log(`drain ${mode} ${service} ${i + 1}/${repeats}`);
        runs.push(
          await runDrain({
            mode,
            services: [service],
            info,
            control,
            events,
            dir: join(work, `${mode}-${service}-${i}`),
            timeoutMs: 240_000,
            pollIntervalMs: 1000,
            postgresUrl: postgres.url,
            postgresSchema: `drain_${service}_${i}`,
          }),
        );
      }
      const byCpu = [...runs].sort((a, b) => (a.cpuUsPerEvent ?? Infinity) - (b.cpuUsPerEvent ?? Infinity));
      drains.push({ ...byCpu[Math.floor((byCpu.length - 1) / 2)]!, runs });
    }
} finally {
  await postgres.stop();
  await child.stop();
  rmSync(work, { recursive: true, force: true });
}
process.stdout.write(`${postgres.version}\n`);
for (const row of drainRows({ drains, raw: [], plans: {} }))
  process.stdout.write(
    `${row.mode.padEnd(8)} ${row.service.padEnd(10)} ${row.events} changes in ${row.seconds.toFixed(1)} s: ` +
      `${row.eventsPerSecond.toFixed(0)} changes/s, ${row.cpuUsPerEvent.toFixed(0)} µs CPU/change in run` +
      `${Number.isNaN(row.vsLocal) ? '' : `, ${row.vsLocal.toFixed(2)}x the jsonl drain`}${row.complete ? '' : ' INCOMPLETE'}\n`,
  );
