#!/usr/bin/env node
// `npm run soak`: the fault-injection soak (test/faults/soak.run.ts) through vitest, bounded by
// SOAK_MINUTES (default 5). Other knobs: SOAK_SEED (first seed), SOAK_SCENARIOS=local,bullmq,
// SOAK_FAULTS (faults per run, 12), SOAK_MAX_FAULT_MS (25000), FAULT_VERBOSE=1 (every fault as
// it happens), FAULT_KEEP=1 (keep every run's files; a run with anomalies keeps them anyway).
// FAULT_SEED=n FAULT_SCENARIO=local|bullmq replays one run of the soak. Exit code 1 when any run
// found an anomaly. The vitest global setup builds dist/ first.
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
// vitest's bin (its package exports do not expose the file to require.resolve).
const vitest = join(root, 'node_modules/vitest/vitest.mjs');
// redis-server and the rest, as `npm test` (its pretest) installs them.
const deps = spawnSync('bash', [join(root, 'scripts/ensure-test-deps.sh')], { cwd: root, stdio: 'inherit' });
if (deps.status !== 0) process.exit(deps.status ?? 1);
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
  { cwd: root, stdio: 'inherit', env: process.env },
);
process.exit(result.status ?? 1);
