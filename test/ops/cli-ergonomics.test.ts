// The CLI's help, --log-level, --json shapes, status --watch, and cursor reset --to latest's
// progress and Ctrl-C, through real child processes (`node dist/cli.js`) against the sandbox.
// The dlq --all / --dry-run rules run in both drivers' ops tests (support/dlq-flow.ts).
import { execFile } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { cliPath } from '../support/process.js';
import { rawConfig, tempDir } from '../support/harness.js';
import { killAllCli, runCli, spawnCli, writeConfig } from './support/cli.js';

const dir = tempDir('feedsync-ops-ergonomics-');
const BACKLOG = 600; // 12+ feed pages per service
const LATENCY_MS = 100; // per request: paging to the newest event takes over a second
let sandbox: Sandbox;
let configFile: string;
const cli = (...args: string[]) => runCli(['--config', configFile, ...args]);

beforeAll(async () => {
  sandbox = await startSandbox({ seed: 5, backlog: BACKLOG, rate: 0, latencyMs: LATENCY_MS });
  const raw = rawConfig(sandbox, dir);
  raw.log = { level: 'warn' };
  configFile = writeConfig(dir, raw);
});
afterAll(async () => {
  await killAllCli();
  await sandbox?.close();
  rmSync(dir, { recursive: true, force: true });
});

const COMMANDS = [
  ['run'],
  ['poll'],
  ['work'],
  ['sandbox'],
  ['demo'],
  ['status'],
  ['cursor'],
  ['cursor', 'show'],
  ['cursor', 'set'],
  ['cursor', 'reset'],
  ['dlq'],
  ['dlq', 'list'],
  ['dlq', 'retry'],
  ['dlq', 'drop'],
  ['check-config'],
];

describe.concurrent('--help', () => {
  it.each(COMMANDS.map((c) => [c.join(' ')]))(
    '%s: a description and at least one example',
    async (command) => {
      const cmd = command.split(' ');
      const r = await runCli([...cmd, '--help']);
      expect(r.code, r.stderr).toBe(0);
      const [usage, , description] = r.stdout.split('\n');
      expect(usage).toMatch(new RegExp(`^Usage: feedsync ${command}\\b`));
      expect(description?.trim().length, `no description in:\n${r.stdout}`).toBeGreaterThan(10);
      const examples = r.stdout.split('\nExamples:\n')[1];
      expect(examples, `no examples in:\n${r.stdout}`).toMatch(
        new RegExp(`^ {2}\\$ feedsync .*${cmd.at(-1)}`, 'm'),
      );
    },
  );
});

describe.concurrent('--log-level', () => {
  it('overrides log.level of the config, before or after the command', async () => {
    for (const args of [
      ['--log-level', 'info', 'run'],
      ['run', '--log-level', 'info'],
    ]) {
      const p = spawnCli(['--config', configFile, ...args]); // the config says warn
      await p.waitForLog((l) => l.msg === 'feedsync started' && l.level === 30, 20_000, 'an info line');
      expect((await p.stop()).code).toBe(0);
    }
  });

  it('rejects an unknown level with exit 2, naming the choices', async () => {
    const r = await cli('status', '--log-level', 'loud');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--log-level.*'loud'.*fatal, error, warn, info, debug, trace, silent/);
  });
});

describe.concurrent('--json', () => {
  it('cursor show --json: {cursors: [{source, cursor}]}', async () => {
    const r = await cli('cursor', 'show', '--json');
    expect(r.code, r.stderr).toBe(0);
    const { cursors } = JSON.parse(r.stdout) as { cursors: { source: string; cursor: unknown }[] };
    expect(cursors.map((c) => c.source)).toEqual(['scheduling', 'workflow']);
    for (const c of cursors)
      expect(c.cursor === null || Number.isInteger(c.cursor), String(c.cursor)).toBe(true);
    expect(Object.keys(cursors[0]!).sort()).toEqual(['cursor', 'source']);
  });

  it('check-config --json: {valid, file, config} with secrets redacted, or {valid, file, errors} and exit 2', async () => {
    const ok = await cli('check-config', '--json');
    expect(ok.code, ok.stderr).toBe(0);
    const good = JSON.parse(ok.stdout) as {
      valid: boolean;
      file: string;
      config: { sources: { password: string }[] };
    };
    expect(good).toMatchObject({ valid: true, file: configFile });
    expect(good.config.sources[0]!.password).toBe('<redacted>');
    expect(ok.stdout).not.toContain(sandbox.password);

    const bad = writeConfig(dir, { ...rawConfig(sandbox, dir), queue: { attempts: 0 } }, 'bad.yaml');
    const r = await runCli(['--config', bad, 'check-config', '--json']);
    expect(r.code).toBe(2);
    const errors = JSON.parse(r.stdout) as { valid: boolean; file: string; errors: string[] };
    expect(errors).toMatchObject({ valid: false, file: bad });
    expect(errors.errors.some((e) => e.startsWith('queue.attempts'))).toBe(true);
    expect(r.stdout).not.toContain(sandbox.password);
  });
});

describe('status --watch', () => {
  it('appends one report per refresh when stdout is not a terminal, and stops with exit 0 on SIGINT', async () => {
    const p = spawnCli(['--config', configFile, 'status', '--watch', '--interval', '0.2']);
    await p.waitForLine(
      () => p.stdout().filter((l) => l.startsWith('SOURCE ')).length >= 3,
      15_000,
      'three reports',
    );
    p.signal('SIGINT');
    expect((await p.waitForExit(10_000)).code).toBe(0);
    expect(p.stdout().join('\n')).not.toContain('\x1b[');
  });

  it('--json --watch prints one compact status document per line', async () => {
    const p = spawnCli(['--config', configFile, 'status', '--watch', '--json', '--interval', '0.2']);
    await p.waitForLine(() => p.stdout().length >= 2, 15_000, 'two documents');
    p.signal('SIGTERM');
    expect((await p.waitForExit(10_000)).code).toBe(0);
    for (const line of p.stdout()) {
      const doc = JSON.parse(line) as { sources: { source: string }[]; sinks: { sink: string }[] };
      expect(doc.sources.map((s) => s.source)).toEqual(['scheduling', 'workflow']);
      expect(doc.sinks.map((s) => s.sink)).toEqual(['file']);
    }
  });

  it('redraws in place on a terminal', async () => {
    // script(1) gives the child a pseudo-terminal; timeout(1) sends the Ctrl-C.
    const command = `timeout --preserve-status -s INT 2 ${process.execPath} ${cliPath} --config ${configFile} status --watch --interval 0.3`;
    const { stdout } = await promisify(execFile)('script', ['-qec', command, '/dev/null'], {
      timeout: 20_000,
    });
    const frames = stdout.split('\x1b[H').slice(1);
    expect(frames.length).toBeGreaterThanOrEqual(2);
    for (const frame of frames) expect(frame).toMatch(/SOURCE[\s\S]*SINK/);
  });
});

describe('cursor reset --to latest', () => {
  const newest = () => Math.max(...sandbox.events('workflow').map((e) => e.id));

  it('shows its progress on stderr while it pages, then moves the cursor', async () => {
    expect((await cli('cursor', 'set', 'workflow', '3')).code).toBe(0);
    const r = await cli('cursor', 'reset', 'workflow', '--to', 'latest');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe(`workflow: cursor 3 → ${newest()}`);
    const progress = r.stderr.split('\n').filter((l) => l.includes('paging the feed'));
    expect(progress[0]).toBe('workflow: paging the feed to its newest event: page 1, after event 0');
    expect(progress.length).toBeGreaterThanOrEqual(2); // over a second of paging, a line every 0.5 s
  });

  it('stops on Ctrl-C with exit 130 and leaves the cursor as it was', async () => {
    expect((await cli('cursor', 'set', 'scheduling', '7')).code).toBe(0);
    const p = spawnCli(['--config', configFile, 'cursor', 'reset', 'scheduling', '--to', 'latest']);
    await p.waitForLine(/page 1, after event 0/, 15_000, 'the first progress line');
    p.signal('SIGINT');
    const exit = await p.waitForExit(10_000);
    expect(exit.code, p.text()).toBe(130);
    expect(p.stderr().join('\n')).toMatch(
      /interrupted after \d+ pages?: the cursor of "scheduling" was not changed/,
    );
    expect(p.stdout()).toEqual([]);
    expect((await cli('cursor', 'show')).stdout).toMatch(/^scheduling\t7$/m);
  });
});

describe('start-up', () => {
  /** Runs `feedsync ...args` until "feedsync started", then stops it; returns every module URL it loaded. */
  async function modulesLoadedBy(args: string[]): Promise<string[]> {
    const loaded = join(dir, `loaded-${args.join('-')}.txt`);
    const hook = join(dir, 'record-loads.mjs');
    writeFileSync(
      hook,
      `import { registerHooks } from 'node:module';
import { writeFileSync } from 'node:fs';
const urls = [];
registerHooks({ load(url, context, next) { urls.push(url); return next(url, context); } });
process.on('exit', () => writeFileSync(${JSON.stringify(loaded)}, urls.join('\\n')));
`,
    );
    const p = spawnCli(['--config', configFile, '--log-level', 'info', ...args], {
      env: { NODE_OPTIONS: `--import=${pathToFileURL(hook).href}` },
    });
    await p.waitForLine(/feedsync started/, 20_000, 'feedsync started'); // JSON or pretty
    expect((await p.stop()).code).toBe(0);
    return readFileSync(loaded, 'utf8').split('\n');
  }
  const unneeded =
    /\/dist\/(sandbox\/|cli-chunks\/(sandbox|demo|bullmq)-)|\/node_modules\/(pino-pretty|bullmq|ioredis)\//;

  it('run with the local queue and JSON logs loads neither the sandbox, nor pino-pretty, nor BullMQ', async () => {
    const urls = await modulesLoadedBy(['run']);
    // dist/cli.js is a bundle (scripts/build.mjs): the daemon is in the daemon-command chunk.
    expect(urls.some((u) => /\/dist\/(daemon\.js$|cli-chunks\/daemon-command-)/.test(u))).toBe(true);
    expect(urls.filter((u) => unneeded.test(u))).toEqual([]);
    // The same recording sees pino-pretty when the logs are for humans.
    const pretty = await modulesLoadedBy(['run', '--pretty']);
    expect(pretty.some((u) => u.includes('/node_modules/pino-pretty/'))).toBe(true);
  });
});
