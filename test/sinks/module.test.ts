import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ModuleSinkConfig } from '../../src/config/types.js';
import { ConfigError, FeedsyncError, NeverError, RetryLaterError } from '../../src/core/errors.js';
import { openModuleSink } from '../../src/sinks/module.js';
import type { Sink } from '../../src/sinks/sink.js';
import { describeSinkConformance } from '../../src/testing/conformance.js';
import { makeChange, testContext } from './support/make-change.js';

const EXAMPLE = resolve(fileURLToPath(import.meta.url), '../../../config/examples/my-sink.js');
const filter = { sources: [], services: [], event_types: [], resource_types: [] };
let root: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'feedsync-module-'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

function config(module: string, options: Record<string, unknown> = {}): ModuleSinkConfig {
  return { name: 'module', type: 'module', module, options, filter };
}

/** Writes a throwaway user module into the temp dir and returns its absolute path. */
let fixtures = 0;
async function userModule(source: string): Promise<string> {
  const path = join(root, `fixture-${++fixtures}.mjs`);
  await writeFile(path, source);
  return path;
}

async function failure(promise: Promise<unknown>): Promise<Error> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(err instanceof Error)) throw new Error('expected a failure');
  return err;
}

describe('module sink', () => {
  describe('with the example config/examples/my-sink.js', () => {
    // options.path is relative: the example resolves it against context.configDir.
    const out = () => join(root, 'example', 'out.txt');
    let broken = false;
    describeSinkConformance('module', {
      open: () => openModuleSink(config(EXAMPLE, { path: 'example/out.txt' }), testContext('module', root)),
      delivered: async () => {
        if (!existsSync(out())) return [];
        const text = await readFile(out(), 'utf8');
        return text
          .split('\n')
          .filter((l) => l !== '')
          .map((l) => l.split(' ')[0]!);
      },
      // The example's appendFile then throws a plain Error (EISDIR): it must surface as retry.
      breakRetry: async () => {
        await rename(out(), out() + '.aside');
        await mkdir(out());
        broken = true;
      },
      heal: async () => {
        if (!broken) return;
        await rmdir(out());
        await rename(out() + '.aside', out());
        broken = false;
      },
    });

    it('writes "key event_type subject_url" lines', async () => {
      const sink = await openModuleSink(config(EXAMPLE, { path: 'lines.txt' }), testContext('module', root));
      const change = makeChange();
      await sink.deliver(change);
      await sink.close();
      expect(await readFile(join(root, 'lines.txt'), 'utf8')).toBe(
        `${change.key} ${change.event_type} ${change.subject_url}\n`,
      );
    });
  });

  const open: Sink[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((s) => s.close()));
  });
  async function openUser(source: string, options: Record<string, unknown> = {}): Promise<Sink> {
    const sink = await openModuleSink(config(await userModule(source), options), testContext('module', root));
    open.push(sink);
    return sink;
  }

  it('names the sink and the path when the module file is missing', async () => {
    const missing = join(root, 'nowhere', 'sink.js');
    const err = await failure(openModuleSink(config(missing), testContext('module', root)));
    expect(err).toBeInstanceOf(ConfigError);
    expect(err.message).toContain('sinks.module.module');
    expect(err.message).toContain(missing);
  });

  it('reports a module that does not parse', async () => {
    const path = await userModule('export default (');
    const err = await failure(openModuleSink(config(path), testContext('module', root)));
    expect(err).toBeInstanceOf(ConfigError);
    expect(err.message).toContain(path);
  });

  it('reports a module with no factory', async () => {
    const path = await userModule('export const notAFactory = 1;');
    const err = await failure(openModuleSink(config(path), testContext('module', root)));
    expect(err).toBeInstanceOf(ConfigError);
    expect(err.message).toMatch(/exports no sink factory/);
    expect(err.message).toContain(path);
  });

  it('reports a factory that returns something without deliver and close', async () => {
    const path = await userModule('export default () => ({ deliver() {} });');
    const err = await failure(openModuleSink(config(path), testContext('module', root)));
    expect(err).toBeInstanceOf(ConfigError);
    expect(err.message).toMatch(/deliver\(change\) and close\(\)/);
    expect(err.message).toContain('keys deliver');
  });

  it('reports a factory that throws, naming the sink', async () => {
    const path = await userModule('export default () => { throw new Error("options.url is required"); };');
    const err = await failure(openModuleSink(config(path), testContext('module', root)));
    expect(err).toBeInstanceOf(FeedsyncError);
    expect(err.message).toContain('sink "module"');
    expect(err.message).toContain('options.url is required');
  });

  it('uses a named createSink export and hands it options and context', async () => {
    const sink = await openUser(
      `export const seen = [];
       export async function createSink(options, context) {
         return { async deliver(c) { if (options.reject !== c.key || context.name !== 'module') throw new Error('bad'); }, async close() {} };
       }`,
      { reject: 'scheduling:1' },
    );
    await expect(sink.deliver(makeChange({ event_id: 1 }))).resolves.toBeUndefined();
    await expect(sink.deliver(makeChange())).rejects.toBeInstanceOf(RetryLaterError);
  });

  it('counts a plain error or a thrown non-error as retry-later, naming sink, module and key', async () => {
    const sink = await openUser(
      `export default () => ({ async deliver(c) { if (c.event_id % 2) throw 'odd'; throw new TypeError('boom'); }, async close() {} });`,
    );
    const even = makeChange({ event_id: 2 });
    const err = await failure(sink.deliver(even));
    expect(err).toBeInstanceOf(RetryLaterError);
    expect(err.message).toContain('sink "module"');
    expect(err.message).toContain(even.key);
    expect(err.message).toContain('boom');
    await expect(sink.deliver(makeChange({ event_id: 3 }))).rejects.toBeInstanceOf(RetryLaterError);
  });

  it('honours errors named NeverError / RetryLaterError from modules that cannot import ours', async () => {
    const sink = await openUser(
      `class NeverError extends Error { name = 'NeverError'; }
       class RetryLaterError extends Error { name = 'RetryLaterError'; retryAfterMs = 1234; }
       export default () => ({
         async deliver(c) { if (c.event_id % 2) throw new NeverError('rejected'); throw new RetryLaterError('busy'); },
         async close() {},
       });`,
    );
    await expect(sink.deliver(makeChange({ event_id: 5 }))).rejects.toBeInstanceOf(NeverError);
    const retry = (await failure(sink.deliver(makeChange({ event_id: 6 })))) as RetryLaterError;
    expect(retry).toBeInstanceOf(RetryLaterError);
    expect(retry.retryAfterMs).toBe(1234);
  });

  it("passes feedsync's own error classes through unchanged", async () => {
    const errors = new URL('../../src/core/errors.ts', import.meta.url).href;
    const sink = await openUser(
      `import { NeverError } from ${JSON.stringify(errors)};
       export const thrown = new NeverError('bad change');
       export default () => ({ async deliver() { throw thrown; }, async close() {} });`,
    );
    const err = await failure(sink.deliver(makeChange()));
    expect(err).toBeInstanceOf(NeverError);
    expect(err.message).toBe('bad change');
  });

  it("calls the user's close() once however often close() is called", async () => {
    const sink = await openUser(
      `let closes = 0;
       export default () => ({ async deliver() {}, async close() { if (++closes > 1) throw new Error('closed twice'); } });`,
    );
    await Promise.all([sink.close(), sink.close()]);
    await sink.close();
    await expect(sink.deliver(makeChange())).rejects.toBeInstanceOf(RetryLaterError);
    expect(await sink.healthy!()).toBe(false);
  });
});
