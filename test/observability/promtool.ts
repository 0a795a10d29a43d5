// Runs the real promtool. It is a required test dependency: a missing binary fails loudly
// instead of silently skipping the conformance checks.
import { spawnSync } from 'node:child_process';

export function promtool(args: string[], stdin?: string): { code: number; output: string } {
  const which = spawnSync('which', ['promtool'], { encoding: 'utf8' });
  if (which.status !== 0) {
    throw new Error('promtool not found on PATH: install the Debian/Ubuntu package `prometheus`');
  }
  const run = spawnSync('promtool', args, { input: stdin, encoding: 'utf8', timeout: 20_000 });
  if (run.error) throw run.error;
  return { code: run.status ?? -1, output: `${run.stdout}${run.stderr}` };
}
