// The admin listener in a real `feedsync run` child polling the sandbox: served from the daemon's
// own driver, its tokens read at start-up (a missing file fails the start naming the key), and
// nothing of it loaded when admin.enabled is false.
import { writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { rawConfig, readJsonl, tempDir, waitFor } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig } from '../support/process.js';
import { call } from './support.js';

const BACKLOG = 30;
const PRELOAD = resolve(import.meta.dirname, 'fixtures/report-admin-loads.mjs');
let sandbox: Sandbox;

beforeAll(async () => {
  sandbox = await startSandbox({ seed: 5, backlog: BACKLOG, rate: 0 });
});
afterEach(() => killAllCli());
afterAll(async () => {
  await sandbox?.close();
});

function config(admin: Record<string, unknown>): { dir: string; file: string } {
  const dir = tempDir('feedsync-admin-daemon-');
  writeFileSync(join(dir, 'admin.token'), 'write-token-for-the-test\n');
  const raw = rawConfig(sandbox, dir);
  raw.log = { level: 'info' };
  raw.admin = { host: '127.0.0.1', port: 0, ...admin };
  return { dir, file: writeConfig(dir, raw) };
}

describe('feedsync run with admin.enabled', () => {
  it('serves the API from its own driver; a cursor move is refused naming this process, which keeps polling', async () => {
    const { dir, file } = config({ enabled: true, token_file: 'admin.token' });
    const p = spawnCli(['--config', file, 'run'], { env: { NODE_OPTIONS: `--import ${PRELOAD}` } });
    const started = await p.waitForLog((l) => l.msg === 'feedsync started', 20_000, 'feedsync started');
    expect(started.admin_port).toEqual(expect.any(Number));
    const api = { url: `http://127.0.0.1:${started.admin_port as number}` };
    const token = 'write-token-for-the-test';
    await waitFor(
      () => readJsonl(join(dir, 'changes.jsonl')).length >= 2 * BACKLOG,
      30_000,
      'the backlog delivered',
    );
    const status = await call(api, token, 'GET', '/api/v1/status');
    expect(status.status).toBe(200);
    expect(status.body.sources.map((s: { source: string }) => s.source)).toEqual(['scheduling', 'workflow']);
    expect(status.body.sinks[0]).toMatchObject({ sink: 'file', dead: 0 });
    expect((await call(api, undefined, 'GET', '/api/v1/status')).status).toBe(401);

    const moved = await call(api, token, 'PUT', '/api/v1/sources/scheduling/cursor', { cursor: 1 });
    expect(moved.status).toBe(409);
    expect(moved.body.holder).toEqual(expect.any(String));
    expect(moved.body.error).toContain('a poller holds it');
    // Still the store's owner and still polling: new events are delivered.
    sandbox.generate('scheduling', 3);
    await waitFor(
      () => readJsonl(join(dir, 'changes.jsonl')).length >= 2 * BACKLOG + 3,
      20_000,
      'the new events delivered after the refused move',
    );
    expect(p.child.exitCode).toBeNull();
    expect(p.stdout().join('\n')).not.toContain(token);
    expect(p.stderr().some((l) => l.startsWith('admin module loaded:'))).toBe(true);
    p.signal('SIGTERM');
    expect((await p.waitForExit(10_000)).code).toBe(0);
  });

  it('fails the start when the token file is missing, naming admin.token_file (exit 2); so does check-config', async () => {
    const { file } = config({ enabled: true, token_file: 'nowhere.token' });
    const check = spawnCli(['--config', file, 'check-config']);
    expect((await check.waitForExit(20_000)).code).toBe(2);
    expect(check.stderr().join('\n')).toMatch(/admin\.token_file: cannot read .*nowhere\.token \(ENOENT\)/);
    const p = spawnCli(['--config', file, 'run']);
    const exit = await p.waitForExit(20_000);
    expect(exit.code).toBe(2);
    expect(p.stderr().join('\n') + p.stdout().join('\n')).toMatch(
      /admin\.token_file: cannot read .*nowhere\.token \(ENOENT\)/,
    );
  });
});

describe('feedsync run without admin.enabled', () => {
  it('neither listens for it nor loads any of its modules', async () => {
    const { file } = config({ enabled: false });
    const p = spawnCli(['--config', file, 'run'], { env: { NODE_OPTIONS: `--import ${PRELOAD}` } });
    const started = await p.waitForLog((l) => l.msg === 'feedsync started', 20_000, 'feedsync started');
    expect(started.admin_port).toBeUndefined();
    p.signal('SIGTERM');
    expect((await p.waitForExit(10_000)).code).toBe(0);
    expect(p.stderr().filter((l) => l.includes('admin module loaded'))).toEqual([]);
  });
});
