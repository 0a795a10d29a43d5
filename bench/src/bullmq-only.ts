// `node bench/dist/bullmq-only.js` (after `npm run build && tsc -p bench`): the scaled-mode part of
// the benchmark, quickly: per service the local drain, poll + 1 work and poll + 2 work on BullMQ
// (each on a fresh Redis), in BENCH_REPEATS rounds of one each (the median by CPU per event), and the
// Redis memory of the backlog queued by poll alone; printed as `npm run bench`'s "scaled mode vs
// local" block. With FEEDSYNC_BENCH_CLI naming another build's dist/cli.js it measures that build
// the same way: two runs, one per build, compare a change to the scaled mode in minutes.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ServiceName } from '../../dist/sandbox/types.js';
import { SandboxControl } from './control.js';
import { inRounds, medianByCpu, runDrain, type DrainMode, type DrainResult } from './drain.js';
import { startSandboxProcess } from './procs.js';
import {
  drainQueued,
  measureQueuedMemory,
  type QueuedDrainResult,
  type RedisMemoryResult,
} from './redis-memory.js';
import { modeLabel, renderScaled, scaledVsLocal } from './report.js';

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
const medians: DrainResult[] = [];
const memory: RedisMemoryResult[] = [];
const queued: QueuedDrainResult[] = [];
try {
  const control = new SandboxControl(info.control_url);
  const events = Object.fromEntries(
    await Promise.all(SERVICES.map(async (s) => [s, await control.events(s)])),
  );
  const drains: { mode: DrainMode; works?: number }[] = [
    { mode: 'local' },
    { mode: 'bullmq', works: 1 },
    { mode: 'bullmq', works: 2 },
  ];
  for (const service of SERVICES) {
    const runs = await inRounds(drains, repeats, ({ mode, works }, i) => {
      log(`drain ${modeLabel({ mode, works })} ${service} ${i + 1}/${repeats}`);
      return runDrain({
        mode,
        works,
        services: [service],
        info,
        control,
        events,
        dir: join(work, `${mode}${works ?? ''}-${service}-${i}`),
        timeoutMs: 240_000,
        pollIntervalMs: 1000,
      });
    });
    medians.push(...runs.map((r) => medianByCpu(r)));
    log(`redis memory: poll alone queues the ${service} backlog on a fresh Redis`);
    memory.push(
      await measureQueuedMemory({
        service,
        info,
        control,
        events: events[service] ?? [],
        dir: join(work, `redis-memory-${service}`),
        timeoutMs: 240_000,
        pollIntervalMs: 1000,
      }),
    );
    const alone = await inRounds([1, 2], repeats, (works, i) => {
      log(`work alone: ${works} work drain the ${service} backlog poll queued ${i + 1}/${repeats}`);
      return drainQueued({
        service,
        works,
        info,
        control,
        events: events[service] ?? [],
        dir: join(work, `queued-${works}-${service}-${i}`),
        timeoutMs: 240_000,
        pollIntervalMs: 1000,
      });
    });
    for (const runs of alone)
      queued.push(runs.sort((a, b) => a.seconds - b.seconds)[Math.floor((runs.length - 1) / 2)]!);
  }
} finally {
  await child.stop();
  rmSync(work, { recursive: true, force: true });
}
process.stdout.write(`cli: ${process.env.FEEDSYNC_BENCH_CLI ?? 'dist/cli.js'}\n`);
for (const d of medians)
  for (const s of d.perService)
    process.stdout.write(
      `${modeLabel(d).padEnd(18)} ${s.service.padEnd(10)} ${s.events} events in ${d.seconds.toFixed(1)} s: ` +
        `${(s.events / d.seconds).toFixed(0)} events/s, ${(d.cpuUsPerEvent ?? NaN).toFixed(0)} µs CPU/event` +
        `${d.cpuUsPerEventWithRedis === undefined ? '' : `, ${(d.cpuUsPerEventWithRedis ?? NaN).toFixed(0)} with Redis`}` +
        `${d.complete ? '' : ' INCOMPLETE'}\n`,
    );
const scaled = scaledVsLocal(medians, memory, queued);
process.stdout.write(`\n${renderScaled(scaled)}\n\n`);
for (const t of scaled.flatMap((x) => x.targets))
  process.stdout.write(`${t.met ? 'met   ' : 'MISSED'} ${t.target}: ${t.figure}\n`);
