// Shared helpers for the config tests: a minimal valid document and error assertions.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'vitest';
import { ConfigError } from '../../src/core/errors.js';

/** The smallest valid raw config; tests override parts of it. */
export function minimalRaw(): Record<string, any> {
  return {
    sources: [
      {
        name: 'sched',
        service: 'scheduling',
        base_url: 'http://127.0.0.1:4010/scheduling',
        username: 'alice',
        password: 'wonderland',
      },
    ],
    sinks: [{ name: 'file', type: 'jsonl', path: './out.jsonl' }],
  };
}

export const MINIMAL_YAML = `
sources:
  - name: sched
    service: scheduling
    base_url: http://127.0.0.1:4010/scheduling
    username: alice
    password: wonderland
sinks:
  - name: file
    type: jsonl
    path: ./out.jsonl
`;

/** Runs `fn`, asserts it throws a ConfigError, and returns it. */
export function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error('expected a ConfigError, nothing was thrown');
}

/** A fresh temp dir, removed by the returned cleanup. */
export function tempDir(): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'feedsync-config-'));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}
