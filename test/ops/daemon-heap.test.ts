// The built command line as it starts: the daemon commands restart themselves once
// (process.execve, same PID) with a bounded young generation (src/heap.ts, docs/performance.md);
// an operator's own setting wins; the restarted daemon still stops gracefully on SIGTERM with
// exit code 0; and the bundle (scripts/build.mjs) reports the package's version.
import { readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { daemonNodeFlags, subcommandOf } from '../../src/heap.js';
import { tempDir, withSandbox } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig } from './support/cli.js';

describe('daemonNodeFlags', () => {
  it('finds the subcommand after global options, with or without their values', () => {
    expect(subcommandOf(['--config', 'run', 'status'])).toBe('status');
    expect(subcommandOf(['--config=x.yaml', '--pretty', 'run'])).toBe('run');
    expect(subcommandOf(['--log-level', 'warn', 'poll', '--help'])).toBe('poll');
    expect(subcommandOf(['--version'])).toBeUndefined();
    expect(subcommandOf(['--', 'work'])).toBe('work');
  });

  it('bounds the young generation for the daemon commands only', () => {
    for (const cmd of ['run', 'poll', 'work', 'demo'])
      expect(daemonNodeFlags([cmd], [], undefined)).toEqual([
        '--max-semi-space-size=8',
        '--min-semi-space-size=8',
      ]);
    for (const args of [['status'], ['check-config'], ['sandbox'], [], ['--config', 'run']])
      expect(daemonNodeFlags(args, [], undefined)).toEqual([]);
  });

  it("leaves the operator's own young-generation setting alone", () => {
    expect(daemonNodeFlags(['run'], ['--max-semi-space-size=32'], undefined)).toEqual([]);
    expect(daemonNodeFlags(['run'], [], '--inspect --max-semi-space-size=0')).toEqual([]);
    expect(daemonNodeFlags(['run'], ['--min_semi_space_size=2'], '')).toEqual([]);
    expect(daemonNodeFlags(['run'], ['--cpu-prof'], '--max-old-space-size=512')).toHaveLength(2);
  });
});

describe('feedsync run (child process)', () => {
  const dir = tempDir('feedsync-heap-');
  let upstream: Server;
  let config: string;
  beforeAll(async () => {
    upstream = createServer((_req, res) => res.writeHead(503).end());
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    const port = (upstream.address() as AddressInfo).port;
    config = writeConfig(dir, {
      store: { path: join(dir, 'store.db') },
      http: { host: '127.0.0.1', port: 0 },
      log: { level: 'info' },
      sources: [
        {
          name: 's',
          service: 'scheduling',
          base_url: `http://127.0.0.1:${port}/s`,
          username: 'u',
          password: 'p',
        },
      ],
      sinks: [{ name: 'f', type: 'jsonl', path: join(dir, 'out.jsonl') }],
    });
  });
  afterAll(async () => {
    await killAllCli();
    await new Promise((resolve) => upstream.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  });

  const argvOf = (pid: number) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');

  it('runs with the bounded young generation in the same process and stops on SIGTERM with 0', async () => {
    const proc = spawnCli(['run'], { config });
    await proc.waitForLog((e) => e.msg === 'feedsync started', 20_000, 'start');
    // The PID the supervisor knows is the restarted program itself.
    expect(argvOf(proc.pid)).toContain('--max-semi-space-size=8');
    expect(argvOf(proc.pid)).toContain('run');
    const exit = await proc.stop(15_000);
    expect(exit, proc.text()).toEqual({ code: 0, signal: null });
    expect(proc.logs().some((e) => e.msg === 'feedsync stopped')).toBe(true);
  });

  it("keeps the operator's NODE_OPTIONS setting and does not restart", async () => {
    const proc = spawnCli(['run'], { config, env: { NODE_OPTIONS: '--max-semi-space-size=0' } });
    await proc.waitForLog((e) => e.msg === 'feedsync started', 20_000, 'start');
    expect(argvOf(proc.pid).some((a) => a.includes('semi-space'))).toBe(false);
    const exit = await proc.stop(15_000);
    expect(exit.code, proc.text()).toBe(0);
  });
});

describe('the bundled command line', () => {
  const dir = tempDir('feedsync-bundle-');
  let hook: Server;
  const userAgents: string[] = [];
  afterAll(async () => {
    await killAllCli();
    await new Promise((resolve) => hook.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  });

  it("posts webhooks with the package's version in the User-Agent", async () => {
    const pkg = JSON.parse(readFileSync(join(import.meta.dirname, '../../package.json'), 'utf8')) as {
      version: string;
    };
    hook = createServer((req, res) => {
      userAgents.push(String(req.headers['user-agent']));
      req.resume().on('end', () => res.writeHead(204).end());
    });
    await new Promise<void>((resolve) => hook.listen(0, '127.0.0.1', resolve));
    const sandbox = await withSandbox({ backlog: 3, rate: 0 });
    try {
      const config = writeConfig(dir, {
        store: { path: join(dir, 'store.db') },
        http: { host: '127.0.0.1', port: 0 },
        sources: [
          {
            name: 'scheduling',
            service: 'scheduling',
            base_url: sandbox.schedulingBaseUrl,
            username: sandbox.username,
            password: sandbox.password,
            start_from: 'earliest',
          },
        ],
        sinks: [
          {
            name: 'hook',
            type: 'webhook',
            url: `http://127.0.0.1:${(hook.address() as AddressInfo).port}/hook`,
            secret: 'bundle-test-secret',
          },
        ],
      });
      const proc = spawnCli(['run'], { config });
      for (let i = 0; i < 200 && userAgents.length === 0; i++) await new Promise((r) => setTimeout(r, 100));
      expect(userAgents[0], proc.text()).toBe(`feedsync/${pkg.version}`);
      expect((await proc.stop(15_000)).code).toBe(0);
    } finally {
      await sandbox.close();
    }
  });
});
