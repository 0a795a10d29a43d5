import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { JsonlSinkConfig } from '../../src/config/types.js';
import { RetryLaterError } from '../../src/core/errors.js';
import { openJsonlSink, type JsonlSink } from '../../src/sinks/jsonl.js';
import { keyOfLine } from '../../src/sinks/jsonl-tail.js';
import { describeSinkConformance } from '../../src/testing/conformance.js';
import { makeChange, testContext } from './support/make-change.js';

const filter = { sources: [], services: [], event_types: [], resource_types: [] };
let root: string;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'feedsync-jsonl-'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

function config(path: string, name = 'jsonl'): JsonlSinkConfig {
  return { name, type: 'jsonl', path, filter };
}

async function lines(path: string): Promise<string[]> {
  const text = await readFile(path, 'utf8');
  return text.split('\n').filter((l) => l !== '');
}

async function keysIn(path: string): Promise<string[]> {
  if (!existsSync(path)) return [];
  return (await lines(path)).map(keyOfLine).filter((k): k is string => k !== undefined);
}

describe('jsonl sink', () => {
  // The file is the receiving system: it does no de-duplication of its own, so every line counts.
  const conformancePath = () => join(root, 'conformance', 'nested', 'changes.jsonl');
  let broken = false;
  describeSinkConformance('jsonl', {
    open: () => openJsonlSink(config(conformancePath()), testContext('jsonl', root)),
    delivered: () => keysIn(conformancePath()),
    // A directory where the file should be: opening it for append fails (even as root).
    breakRetry: async () => {
      await rename(conformancePath(), conformancePath() + '.aside');
      await mkdir(conformancePath());
      broken = true;
    },
    heal: async () => {
      if (!broken) return;
      await rmdir(conformancePath());
      await rename(conformancePath() + '.aside', conformancePath());
      broken = false;
    },
  });

  const open: JsonlSink[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((s) => s.close()));
  });
  async function openAt(path: string, options = {}): Promise<JsonlSink> {
    const sink = await openJsonlSink(config(path), testContext('jsonl', root), options);
    open.push(sink);
    return sink;
  }

  it('writes thousands of concurrent deliveries in a few group commits, each line whole', async () => {
    const path = join(root, 'group.jsonl');
    const sink = await openAt(path);
    const changes = Array.from({ length: 3000 }, () => makeChange());
    await Promise.all(changes.map((c) => sink.deliver(c)));
    const written = await lines(path);
    expect(written).toHaveLength(3000);
    const parsed = written.map((l) => JSON.parse(l) as { key: string });
    expect(new Set(parsed.map((p) => p.key))).toEqual(new Set(changes.map((c) => c.key)));
    expect(parsed[0]).toEqual(changes[0]);
    expect(sink.stats.lines).toBe(3000);
    expect(sink.stats.batches).toBeLessThanOrEqual(3);
  });

  it('joins deliveries that arrive during a write into the next single write', async () => {
    const path = join(root, 'waves.jsonl');
    const sink = await openAt(path);
    const first = sink.deliver(makeChange());
    // Issued after the first batch has started: they must share one batch, not take one each.
    await new Promise((r) => setImmediate(r));
    const wave = Array.from({ length: 50 }, () => sink.deliver(makeChange()));
    await Promise.all([first, ...wave]);
    expect(sink.stats.lines).toBe(51);
    expect(sink.stats.batches).toBeLessThanOrEqual(3);
  });

  it('does not add a second line for a key already in the file after a restart', async () => {
    const path = join(root, 'restart.jsonl');
    const change = makeChange();
    const first = await openAt(path);
    await first.deliver(change);
    await first.close();
    const second = await openAt(path);
    await second.deliver(change);
    await second.deliver(makeChange());
    expect(await keysIn(path)).toEqual([change.key, expect.any(String)]);
    expect(second.stats.lines).toBe(1);
  });

  it('tolerates a torn last line: skips it and starts the next line cleanly', async () => {
    const path = join(root, 'torn.jsonl');
    const kept = makeChange();
    const torn = makeChange();
    const tornLine = JSON.stringify(torn).slice(0, 40);
    await writeFile(path, JSON.stringify(kept) + '\n' + tornLine);
    const sink = await openAt(path);
    await sink.deliver(kept);
    await sink.deliver(torn);
    const text = await readFile(path, 'utf8');
    expect(text.endsWith('\n')).toBe(true);
    const all = text.split('\n');
    expect(all[1]).toBe(tornLine);
    expect(JSON.parse(all[2]!)).toEqual(torn);
    expect(await keysIn(path)).toEqual([kept.key, torn.key]);
  });

  it('remembers only keys inside the tail window it reads at open', async () => {
    const path = join(root, 'window.jsonl');
    const old = makeChange();
    const recent = makeChange();
    await writeFile(path, JSON.stringify(old) + '\n' + JSON.stringify(recent) + '\n');
    const sink = await openAt(path, { tailBytes: JSON.stringify(recent).length + 10 });
    await sink.deliver(recent);
    await sink.deliver(old);
    expect(await keysIn(path)).toEqual([old.key, recent.key, old.key]);
  });

  it('fails with RetryLaterError naming sink and path while the directory cannot be created', async () => {
    const blocker = join(root, 'blocker');
    await writeFile(blocker, 'a file where a directory should be');
    const path = join(blocker, 'changes.jsonl');
    const sink = await openAt(path);
    const err = await sink.deliver(makeChange()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RetryLaterError);
    expect((err as Error).message).toContain('sink "jsonl"');
    expect((err as Error).message).toContain(path);
    expect(await sink.healthy()).toBe(false);
    await rm(blocker);
    const change = makeChange();
    await sink.deliver(change);
    expect(await keysIn(path)).toEqual([change.key]);
    expect(await sink.healthy()).toBe(true);
  });

  it('starts a new file when the old one is rotated away', async () => {
    const path = join(root, 'rotate.jsonl');
    const sink = await openAt(path);
    const before = makeChange();
    await sink.deliver(before);
    await rename(path, path + '.1');
    const after = makeChange();
    await sink.deliver(after);
    expect(await keysIn(path + '.1')).toEqual([before.key]);
    expect(await keysIn(path)).toEqual([after.key]);
  });

  it('rejects deliveries after close instead of losing them', async () => {
    const sink = await openAt(join(root, 'closed.jsonl'));
    await sink.close();
    await expect(sink.deliver(makeChange())).rejects.toBeInstanceOf(RetryLaterError);
  });
});
