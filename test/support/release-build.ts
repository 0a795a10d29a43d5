// An earlier release of feedsync, built from the project's own history, for upgrade tests: the
// release's tree (`git archive`), this checkout's node_modules, its own build script. Built once per
// machine and commit (kept under the temp directory).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, renameSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '../..');

/** Whether this clone has `commit` (a shallow clone may not). */
export function hasCommit(commit: string): boolean {
  try {
    execFileSync('git', ['-C', ROOT, 'cat-file', '-e', `${commit}^{commit}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** The path of the release's `dist/cli.js`, building it first if need be. */
export function releaseCli(commit: string): string {
  const dir = join(tmpdir(), `feedsync-release-${commit}`);
  const cli = join(dir, 'dist', 'cli.js');
  if (existsSync(cli)) return cli;
  const building = `${dir}.${process.pid}`;
  rmSync(building, { recursive: true, force: true });
  mkdirSync(building, { recursive: true });
  try {
    const tar = execFileSync('git', ['-C', ROOT, 'archive', '--format=tar', commit], {
      maxBuffer: 256 * 1024 * 1024,
    });
    execFileSync('tar', ['-x', '-C', building], { input: tar });
    symlinkSync(join(ROOT, 'node_modules'), join(building, 'node_modules'), 'dir');
    execFileSync(process.execPath, [join(building, 'scripts', 'build.mjs')], {
      cwd: building,
      stdio: 'ignore',
    });
    // Another test process may have finished the same build meanwhile: either copy will do.
    if (!existsSync(cli)) {
      rmSync(dir, { recursive: true, force: true });
      renameSync(building, dir);
    }
  } finally {
    rmSync(building, { recursive: true, force: true });
  }
  return cli;
}
