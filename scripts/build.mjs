// Compile TypeScript and copy the non-TS assets that ship inside the package (JSON Schemas, the
// admin console's files), then
// bundle the command line: dist/cli.js and dist/cli-chunks/ replace the compiled cli.js.
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  statSync,
} from 'node:fs';
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
    // The admin console's static files ship as they are (no bundler: they must work offline).
    else if (
      name.endsWith('.json') ||
      relative(join(root, 'src', 'admin', 'console'), path).split('/')[0] !== '..'
    ) {
      const target = join(out, relative(join(root, 'src'), path));
      mkdirSync(dirname(target), { recursive: true });
      cpSync(path, target);
    }
  }
}
copyAssets(join(root, 'src'));
await bundleCli();
chmodSync(join(out, 'cli.js'), 0o755);
const old = join(root, `.dist-old-${process.pid}`);
if (existsSync(join(root, 'dist'))) renameSync(join(root, 'dist'), old);
renameSync(out, join(root, 'dist'));
rmSync(old, { recursive: true, force: true });

/**
 * Node spends most of a start-up resolving and reading ~250 module files (ours and the
 * dependencies'); one file per lazily loaded command costs a fraction (docs/performance.md has
 * the figures). The library entry points (dist/index.js, dist/testing/) stay unbundled. External:
 * native packages (better-sqlite3, msgpackr-extract, loaded by path), pino-pretty (only for
 * `--pretty`) and @opentelemetry/api (a process-wide singleton). bullmq and ioredis are
 * bundled: their scripts are JS modules, and the few `__dirname` uses left (ioredis's version
 * lookup, bullmq's sandboxed processors) are in try blocks or paths feedsync never takes. Loading
 * them as separate files cost each `poll`/`work` process ~80 ms more CPU at start (measured).
 */
async function bundleCli() {
  const { build } = await import('rolldown');
  const pkgVersion = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version;
  // Both version modules read package.json by a path relative to themselves, which a chunk in
  // another directory would miss: in the bundle the version is a constant.
  const versionModules = {
    [join(out, 'version.js')]: `export const version = ${JSON.stringify(pkgVersion)};`,
    [join(out, 'sinks', 'version.js')]:
      `export function feedsyncVersion() { return ${JSON.stringify(pkgVersion)}; }`,
  };
  const bundled = join(root, `.dist-bundle-${process.pid}`);
  rmSync(bundled, { recursive: true, force: true });
  try {
    await build({
      input: join(out, 'cli.js'),
      platform: 'node',
      cwd: out,
      // pg stays in node_modules: bundled, BullMQ's optional Postgres backend would pull it into
      // the bullmq chunk that every `poll`/`work` start parses.
      external: [/^node:/, 'better-sqlite3', 'msgpackr-extract', 'pino-pretty', 'pg', /^@opentelemetry\//],
      plugins: [{ name: 'feedsync-version', load: (id) => versionModules[id] }],
      output: { dir: bundled, format: 'esm', chunkFileNames: 'cli-chunks/[name]-[hash].js' },
      logLevel: 'warn',
    });
    cpSync(bundled, out, { recursive: true });
  } finally {
    rmSync(bundled, { recursive: true, force: true });
  }
}
