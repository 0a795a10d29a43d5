// What `npm publish` would ship, and `feedsync/testing` used the way a sink author outside this
// repository uses it: a separate project with the packed tarball in its node_modules and its own
// vitest run (a child process), against the example module sink and a sink that breaks the rules.
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { tempDir } from '../support/harness.js';

const run = promisify(execFile);
const root = resolve(import.meta.dirname, '../..');
const dir = tempDir('feedsync-package-');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface PackJson {
  filename: string;
  files: { path: string }[];
}
const pack = async (...args: string[]): Promise<PackJson> => {
  const { stdout } = await run('npm', ['pack', '--json', '--ignore-scripts', ...args], {
    cwd: root,
    maxBuffer: 16 * 1024 * 1024,
  });
  return (JSON.parse(stdout) as PackJson[])[0]!;
};

/** Every file an `exports` entry or `bin` points at. */
function entryPoints(): string[] {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
    exports: Record<string, string | Record<string, string>>;
    bin: Record<string, string>;
  };
  const targets = Object.values(pkg.exports).flatMap((t) => (typeof t === 'string' ? [t] : Object.values(t)));
  return [...targets, ...Object.values(pkg.bin)].map((p) => p.replace(/^\.\//, ''));
}

describe('the published package', () => {
  it('ships only what users run: dist, config, README; no bench, no source maps, no sources or tests', async () => {
    const files = (await pack('--dry-run')).files.map((f) => f.path);
    expect(files.filter((f) => !/^(dist\/|config\/|README\.md$|package\.json$)/.test(f))).toEqual([]);
    expect(files.filter((f) => /(^|\/)bench(\/|$)/i.test(f))).toEqual([]);
    expect(files.filter((f) => f.endsWith('.map'))).toEqual([]);
    for (const f of [
      ...entryPoints(),
      'dist/cli.js',
      'dist/index.d.ts',
      'dist/testing/index.js',
      'dist/testing/index.d.ts',
      'config/feedsync.yaml',
      'config/examples/my-sink.js',
      // The admin console's files, read from dist/admin/console/ by the bundled CLI.
      'dist/admin/console/index.html',
      'dist/admin/console/console.js',
      'dist/admin/console/console.css',
      'dist/admin/console/favicon.svg',
    ])
      expect(files, f).toContain(f);
  });
});

describe('feedsync/testing from a project outside this repository', () => {
  const project = join(dir, 'my-sink-project');

  /** Installs the packed tarball as node_modules/feedsync; its dependencies are this repo's. */
  async function installPacked(): Promise<void> {
    const { filename } = await pack('--pack-destination', dir);
    const installed = join(project, 'node_modules', 'feedsync');
    mkdirSync(installed, { recursive: true });
    await run('tar', ['-xzf', join(dir, filename), '-C', installed, '--strip-components=1']);
    symlinkSync(join(root, 'node_modules'), join(installed, 'node_modules'), 'dir');
    symlinkSync(join(root, 'node_modules', 'vitest'), join(project, 'node_modules', 'vitest'), 'dir');
  }

  const harness = (sink: string) => `
import { mkdir, mkdtemp, readFile, rename, rmdir } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describeSinkConformance, loadModuleSink } from 'feedsync/testing';

const dir = await mkdtemp(join(tmpdir(), 'outside-sink-'));
const out = join(dir, 'out.txt');
let broken = false;
describeSinkConformance('${sink}', {
  open: () => loadModuleSink(new URL('./${sink}.js', import.meta.url).pathname, { name: '${sink}', options: { path: 'out.txt' }, configDir: dir }),
  delivered: async () => existsSync(out) ? (await readFile(out, 'utf8')).split('\\n').filter(Boolean).map((l) => l.split(' ')[0]) : [],
  breakRetry: async () => { await rename(out, out + '.aside'); await mkdir(out); broken = true; },
  heal: async () => { if (!broken) return; await rmdir(out); await rename(out + '.aside', out); broken = false; },
});
`;

  it('runs the conformance suite with vitest: the example sink passes, a sink that does not de-duplicate fails', async () => {
    mkdirSync(project, { recursive: true });
    await installPacked();
    writeFileSync(
      join(project, 'package.json'),
      '{ "name": "my-sink", "private": true, "type": "module" }\n',
    );
    copyFileSync(join(root, 'config/examples/my-sink.js'), join(project, 'my-sink.js'));
    writeFileSync(
      join(project, 'careless-sink.js'),
      `import { appendFile } from 'node:fs/promises';
import { resolve } from 'node:path';
export default async (options, context) => ({
  async deliver(change) { await appendFile(resolve(context.configDir, options.path), change.key + '\\n'); },
  async close() {},
});
`,
    );
    writeFileSync(join(project, 'my-sink.test.js'), harness('my-sink'));
    writeFileSync(join(project, 'careless-sink.test.js'), harness('careless-sink'));
    writeFileSync(
      join(project, 'vitest.config.js'),
      'export default { test: { include: ["*.test.js"] } };\n',
    );

    const results = join(project, 'results.json');
    const vitest = join(project, 'node_modules', 'vitest', 'vitest.mjs');
    const exit = await run(process.execPath, [vitest, 'run', '--reporter=json', `--outputFile=${results}`], {
      cwd: project,
      env: { ...process.env, CI: '1', NODE_OPTIONS: '' },
      timeout: 120_000,
    }).then(
      () => 0,
      (err: { code?: number; stderr?: string }) => err.code ?? -1,
    );
    expect(exit).toBe(1); // the careless sink fails, as it must

    const report = JSON.parse(readFileSync(results, 'utf8')) as {
      testResults: { name: string; assertionResults: { title: string; status: string }[] }[];
    };
    const of = (file: string) => report.testResults.find((r) => r.name.endsWith(file))!.assertionResults;
    const mine = of('my-sink.test.js');
    expect(mine.length).toBeGreaterThanOrEqual(4);
    expect(mine.filter((t) => t.status !== 'passed')).toEqual([]);
    expect(mine.map((t) => t.title)).toContain(
      'reports a transient failure as RetryLaterError and delivers once healed',
    );
    const careless = of('careless-sink.test.js');
    expect(careless.find((t) => t.title.startsWith('keeps one logical copy'))?.status).toBe('failed');
    expect(careless.find((t) => t.title.startsWith('delivers 100 concurrent'))?.status).toBe('passed');
  });
});
