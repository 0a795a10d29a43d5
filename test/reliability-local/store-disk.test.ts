// The store on a location that cannot be written: `feedsync run` refuses to start with an error
// naming the store path (exit 1 or 2), does not damage the stored cursor, and once the location is
// writable again resumes from that cursor (a fresh jsonl then holds exactly the newer events).
//
// A root test process is not stopped by chmod, so the unwritable locations are real: a regular file
// where the store's directory should be (works anywhere), and a small tmpfs mount remounted
// read-only or filled to the last byte (needs mount privileges; that test runs only where
// `mount -t tmpfs` is permitted, which it is in this sandbox).
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { rawConfig, readJsonl, tempDir } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig, type CliProcess } from '../support/process.js';
import { echoPrefix, readCursors, SEED, sandboxKeys, SERVICES, startRun, waitForAllKeys } from './support.js';

const mountDir = join(tempDir('feedsync-disk-'), 'store');
mkdirSync(mountDir);
const canMount =
  spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=64m', 'tmpfs', mountDir], { stdio: 'ignore' }).status === 0;

function mountCmd(...args: string[]): void {
  const r = spawnSync('mount', args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`mount ${args.join(' ')} failed: ${r.stderr}`);
}

/** Config with the store at `storePath` and a jsonl sink outside the store's location. */
function configFor(sandbox: Sandbox, dir: string, storePath: string, jsonl: string): string {
  const raw = rawConfig(sandbox, dir, {
    sinks: [{ name: 'file', type: 'jsonl', path: join(dir, jsonl) }],
  });
  raw.store = { path: storePath };
  raw.log = { level: 'info' };
  return writeConfig(dir, raw, `${jsonl}.yaml`);
}

async function expectStartFailure(configPath: string, storePath: string): Promise<CliProcess> {
  const p = spawnCli(['run'], { config: configPath, echo: echoPrefix('failing run') });
  const exit = await p.waitForExit(15_000);
  expect([1, 2], `seed ${SEED}: exit ${JSON.stringify(exit)}\n${p.text()}`).toContain(exit.code);
  expect(p.stderr().join('\n')).toContain(storePath);
  return p;
}

describe(`store on an unwritable location (RELIABILITY_SEED=${SEED})`, () => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await startSandbox({ seed: SEED, backlog: 100 });
  });
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
    if (canMount) spawnSync('umount', ['-l', mountDir]);
  });

  it('a regular file where the store directory should be: clear error at start', async () => {
    const dir = tempDir('feedsync-notdir-');
    writeFileSync(join(dir, 'state'), 'not a directory');
    const storePath = join(dir, 'state', 'feedsync.db');
    const p = await expectStartFailure(configFor(sandbox, dir, storePath, 'a.jsonl'), storePath);
    expect(p.stderr().join('\n')).toMatch(/store/);
    expect(readJsonl(join(dir, 'a.jsonl'))).toEqual([]);
  });

  it.runIf(canMount)('read-only, then full: fails clearly, keeps the cursor, resumes from it', async () => {
    const dir = tempDir('feedsync-disk-run-');
    const storePath = join(mountDir, 'feedsync.db');

    // A store with a cursor: catch up on the backlog, stop gracefully.
    const first = configFor(sandbox, dir, storePath, 'first.jsonl');
    const run1 = await startRun({ configPath: first });
    await waitForAllKeys(join(dir, 'first.jsonl'), sandboxKeys(sandbox), 60_000, `seed ${SEED}`);
    expect(await run1.stop(8000)).toEqual({ code: 0, signal: null });
    const stored = readCursors(storePath);
    expect([...stored.keys()].sort()).toEqual([...SERVICES]);

    // New events upstream, so a run that wrongly got going would have something to write.
    for (const service of SERVICES) sandbox.generate(service, 20);

    mountCmd('-o', 'remount,ro', mountDir);
    try {
      await expectStartFailure(configFor(sandbox, dir, storePath, 'ro.jsonl'), storePath);
    } finally {
      mountCmd('-o', 'remount,rw', mountDir);
    }
    expect(readCursors(storePath)).toEqual(stored);
    expect(readJsonl(join(dir, 'ro.jsonl'))).toEqual([]);

    const filler = join(mountDir, 'filler');
    try {
      writeFileSync(filler, Buffer.alloc(80 * 1024 * 1024, 1));
    } catch (err) {
      expect((err as NodeJS.ErrnoException).code).toBe('ENOSPC');
    }
    try {
      await expectStartFailure(configFor(sandbox, dir, storePath, 'full.jsonl'), storePath);
    } finally {
      rmSync(filler, { force: true });
    }
    expect(readCursors(storePath)).toEqual(stored);
    expect(readJsonl(join(dir, 'full.jsonl'))).toEqual([]);

    // Writable again: resumes after the stored cursor — the fresh jsonl gets only the newer events.
    const resumedPath = join(dir, 'resumed.jsonl');
    const newer = new Set<string>();
    for (const service of SERVICES)
      for (const e of sandbox.events(service))
        if (e.id > stored.get(service)!) newer.add(`${service}:${e.id}`);
    expect(newer.size).toBe(40);
    const run2 = await startRun({ configPath: configFor(sandbox, dir, storePath, 'resumed.jsonl') });
    await waitForAllKeys(resumedPath, newer, 60_000, `seed ${SEED}`);
    expect(await run2.stop(8000)).toEqual({ code: 0, signal: null });
    expect(
      readJsonl(resumedPath)
        .map((c) => c.key)
        .sort(),
    ).toEqual([...newer].sort());
  });
});
