// Compile TypeScript and copy the non-TS assets that ship inside the package (JSON Schemas).
import { execFileSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
// Build into a fresh directory and swap it in at the end, so a process started from dist/ while a
// build runs (parallel test runs) never sees a half-written or missing tree.
const out = join(root, `.dist-build-${process.pid}`);
rmSync(out, { recursive: true, force: true });
try {
  execFileSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.json'), '--outDir', out], {
    stdio: 'inherit',
  });
} catch (err) {
  rmSync(out, { recursive: true, force: true });
  throw err;
}

function copyAssets(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) copyAssets(path);
    else if (name.endsWith('.json')) {
      const target = join(out, relative(join(root, 'src'), path));
      mkdirSync(dirname(target), { recursive: true });
      cpSync(path, target);
    }
  }
}
copyAssets(join(root, 'src'));
chmodSync(join(out, 'cli.js'), 0o755);
const old = join(root, `.dist-old-${process.pid}`);
if (existsSync(join(root, 'dist'))) renameSync(join(root, 'dist'), old);
renameSync(out, join(root, 'dist'));
rmSync(old, { recursive: true, force: true });
