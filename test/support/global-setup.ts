// Runs once before the suite: the tests that start child processes use the built entry point
// (dist/cli.js), so make sure it exists and is fresh.
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

export default function setup(): void {
  if (process.env.FEEDSYNC_SKIP_BUILD === '1') return;
  execFileSync(process.execPath, [join(import.meta.dirname, '../../scripts/build.mjs')], { stdio: 'inherit' });
}
