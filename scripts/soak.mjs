#!/usr/bin/env node
// `npm run soak`: the fault-injection soak (test/faults/soak.run.ts) through vitest, bounded by
// SOAK_MINUTES (default 5). Other knobs: SOAK_SEED (first seed), SOAK_SCENARIOS=local,bullmq,
// SOAK_FAULTS (faults per run, 12), SOAK_MAX_FAULT_MS (25000), FAULT_VERBOSE=1 (every fault as
// it happens), FAULT_KEEP=1 (keep every run's files; a run with anomalies keeps them anyway).
// FAULT_SEED=n FAULT_SCENARIO=local|bullmq replays one run of the soak. Exit code 1 when any run
// found an anomaly. The vitest global setup builds dist/ first.
//
// SOAK_SCENARIOS may also name `cluster`, `cluster-pollers`, `cluster-restart` and `sentinel`: the
// Redis topology runs of the test suite (test/reliability-bullmq/cluster.test.ts: slot migrations
// and a primary failover mid-drain; cluster-pollers.test.ts: pollers killed and frozen while pages
// go through the outbox; cluster-restart.test.ts: primaries restarted in place with the tail of
// their AOF cut; sentinel-failover.test.ts: a failover, then the old primary back) again and again, each
// with a fresh seed (and RB_BACKLOG events per service, default 20000, where the test takes it), for
// their share of SOAK_MINUTES.
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
// vitest's bin (its package exports do not expose the file to require.resolve).
const vitest = join(root, 'node_modules/vitest/vitest.mjs');
// redis-server and the rest, as `npm test` (its pretest) installs them.
const deps = spawnSync('bash', [join(root, 'scripts/ensure-test-deps.sh')], { cwd: root, stdio: 'inherit' });
if (deps.status !== 0) process.exit(deps.status ?? 1);
const all = (process.env.SOAK_SCENARIOS ?? 'local,bullmq')
  .split(',')
  .map((x) => x.trim())
  .filter(Boolean);
const TOPOLOGY = {
  cluster: 'test/reliability-bullmq/cluster.test.ts',
  'cluster-pollers': 'test/reliability-bullmq/cluster-pollers.test.ts',
  'cluster-restart': 'test/reliability-bullmq/cluster-restart.test.ts',
  sentinel: 'test/reliability-bullmq/sentinel-failover.test.ts',
};
const faults = all.filter((x) => !(x in TOPOLOGY));
const topology = all.filter((x) => x in TOPOLOGY);
const minutes = Number(process.env.SOAK_MINUTES ?? 5);
// The minutes are shared out in proportion to the scenarios named.
const share = (n) => (minutes * n) / all.length;
let failed = false;

if (faults.length > 0) {
  const result = spawnSync(
    process.execPath,
    [
      vitest,
      'run',
      '--config',
      join(root, 'test/faults/vitest.soak.config.ts'),
      '--reporter',
      'default',
      ...process.argv.slice(2),
    ],
    {
      cwd: root,
      stdio: 'inherit',
      env: { ...process.env, SOAK_SCENARIOS: faults.join(','), SOAK_MINUTES: String(share(faults.length)) },
    },
  );
  failed ||= result.status !== 0;
}

if (topology.length > 0) {
  const until = Date.now() + share(topology.length) * 60_000;
  let seed = Number(process.env.SOAK_SEED ?? Date.now() % 2_000_000_000);
  for (let run = 0; Date.now() < until; run++) {
    const scenario = topology[run % topology.length];
    seed += 1;
    console.log(`soak: ${scenario} run ${run + 1}, seed ${seed}`);
    const result = spawnSync(process.execPath, [vitest, 'run', TOPOLOGY[scenario], '--reporter', 'default'], {
      cwd: root,
      stdio: 'inherit',
      env: {
        ...process.env,
        FEEDSYNC_RELIABILITY_SEED: String(seed),
        RB_BACKLOG: process.env.RB_BACKLOG ?? '20000',
        // Built once, by the first run's global setup.
        ...(run > 0 && { FEEDSYNC_SKIP_BUILD: '1' }),
      },
    });
    if (result.status !== 0) {
      failed = true;
      console.log(`soak: ${scenario} run ${run + 1} FAILED (seed ${seed})`);
    }
  }
}
process.exit(failed ? 1 : 0);
