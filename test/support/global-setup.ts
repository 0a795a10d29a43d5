// Runs once before the suite: the tests that start child processes use the built entry point
// (dist/cli.js), so build it fresh. A failed build is reported but does not stop the unit tests;
// the build removes dist/ first, so every process test then fails loudly instead of running stale code.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

export default function setup(): void {
  if (process.env.FEEDSYNC_SKIP_BUILD === '1') return;
  const result = spawnSync(process.execPath, [join(import.meta.dirname, '../../scripts/build.mjs')], {
    stdio: 'inherit',
  });
  if (result.status !== 0) console.error('\n*** build failed: tests that run dist/cli.js will fail ***\n');
}
