// Whatever the input, loading a config either succeeds or throws a ConfigError: never a
// TypeError from deep inside, never a hang, never a secret in the message.
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { stringify } from 'yaml';
import { describe, expect, it } from 'vitest';
import { parseConfig, validateConfig } from '../../src/config/load.js';
import { ConfigError } from '../../src/core/errors.js';

const EXAMPLE = readFileSync(
  resolve(dirname(fileURLToPath(import.meta.url)), '../../config/feedsync.yaml'),
  'utf8',
);
const SECRETS = ['sched-pass-Q1', 'wf-pass-Q2', 'hook-secret-Q3'];
const ENV = {
  SCHEDULING_USER: 'su',
  SCHEDULING_PASSWORD: SECRETS[0],
  WORKFLOW_USER: 'wu',
  WORKFLOW_PASSWORD: SECRETS[1],
  WEBHOOK_SECRET: SECRETS[2],
  PORT: '9100',
  FLAG: 'true',
};
const DIR = '/etc/feedsync';

/** Runs `load`; returns the config, or undefined after checking the error is a clean ConfigError. */
function loadsOrConfigError<T>(load: () => T): T | undefined {
  try {
    return load();
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    for (const secret of SECRETS) expect(err.message).not.toContain(secret);
    return undefined;
  }
}

const EXAMPLE_CONFIG = parseConfig(EXAMPLE, { dir: DIR, env: ENV }).config;
const exampleRaw = (): Record<string, unknown> => structuredClone(EXAMPLE_CONFIG) as any;

/** Every container (object or array) in `value`, with the path to it. */
function containers(
  value: unknown,
  path: (string | number)[] = [],
): { path: (string | number)[]; node: any }[] {
  if (value === null || typeof value !== 'object') return [];
  const here = [{ path, node: value }];
  const children = Array.isArray(value)
    ? value.flatMap((v, i) => containers(v, [...path, i]))
    : Object.entries(value).flatMap(([k, v]) => containers(v, [...path, k]));
  return [...here, ...children];
}

const interesting = fc.oneof(
  fc.constantFrom(
    'latest',
    'earliest',
    '-1',
    '007',
    'kafka',
    'webhook',
    'module',
    'bullmq',
    'http://127.0.0.1:1/x/',
    'ftp://x',
    'redis://:pw@h:1',
    '${PORT}',
    '${UNSET_VAR}',
    '$${PORT}',
    '',
    'a:b',
    '__proto__',
    'constructor',
  ),
  fc.integer({ min: -5, max: 70000 }),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.jsonValue({ maxDepth: 2 }),
  fc.anything({ maxDepth: 2 }),
);

const mutation = fc.record({
  target: fc.nat(),
  op: fc.constantFrom('set', 'delete', 'add', 'replace-container'),
  key: fc.oneof(fc.constantFrom('name', 'type', 'password_file', 'filter', 'port', 'extra'), fc.string()),
  value: interesting,
});

type Mutation = { target: number; op: string; key: string; value: unknown };

function mutate(raw: Record<string, unknown>, mutations: Mutation[]): Record<string, unknown> {
  for (const m of mutations) {
    const all = containers(raw);
    const { path, node } = all[m.target % all.length]!;
    const keys = Array.isArray(node) ? node.map((_, i) => i) : Object.keys(node);
    const existing = keys.length > 0 ? keys[m.target % keys.length] : undefined;
    if (m.op === 'delete' && existing !== undefined) {
      if (Array.isArray(node)) node.splice(existing as number, 1);
      else delete node[existing];
    } else if (m.op === 'set' && existing !== undefined) {
      node[existing] = m.value;
    } else if (m.op === 'add') {
      if (Array.isArray(node)) node.push(m.value);
      else node[m.key] = m.value;
    } else if (m.op === 'replace-container' && path.length > 0) {
      const parent = containers(raw).find((c) => c.path.join('/') === path.slice(0, -1).join('/'))!;
      parent.node[path[path.length - 1]!] = m.value;
    }
  }
  return raw;
}

describe('any input → a config or a ConfigError', () => {
  it('random mutations of the example config (in memory and through YAML)', () => {
    fc.assert(
      fc.property(fc.array(mutation, { minLength: 1, maxLength: 4 }), (mutations) => {
        const mutated = mutate(exampleRaw(), mutations);
        const config = loadsOrConfigError(() => validateConfig(structuredClone(mutated), { dir: DIR }));
        if (config) {
          // The effective config is a fixed point: validating it again changes nothing.
          expect(validateConfig(structuredClone(config), { dir: DIR })).toEqual(config);
        }
        let yaml: string;
        try {
          yaml = stringify(mutated);
        } catch {
          return; // not representable as YAML (e.g. a symbol): nothing to load
        }
        loadsOrConfigError(() => parseConfig(yaml, { dir: DIR, env: ENV }));
      }),
      { numRuns: 300 },
    );
  });

  it('random edits of the example YAML text', () => {
    const edit = fc.record({
      at: fc.nat(),
      remove: fc.nat({ max: 8 }),
      insert: fc.oneof(
        fc.constantFrom(
          ':',
          '-',
          ' ',
          '\n',
          '  ',
          '"',
          "'",
          '{',
          '}',
          '[',
          ']',
          '&a',
          '*a',
          '!!',
          '#',
          '${',
          '$',
          '|',
        ),
        fc.string({ maxLength: 6 }),
      ),
    });
    fc.assert(
      fc.property(fc.array(edit, { minLength: 1, maxLength: 5 }), (edits) => {
        let text = EXAMPLE;
        for (const e of edits) {
          const at = e.at % (text.length + 1);
          text = text.slice(0, at) + e.insert + text.slice(at + e.remove);
        }
        loadsOrConfigError(() => parseConfig(text, { dir: DIR, env: ENV }));
      }),
      { numRuns: 150 },
    );
  });

  it('random YAML documents', () => {
    const doc = fc.oneof(
      fc.anything({ maxDepth: 3 }).map((v) => {
        try {
          return stringify(v) ?? '';
        } catch {
          return 'x';
        }
      }),
      fc.string({
        unit: fc.constantFrom('a', ':', ' ', '\n', '-', '[', ']', '{', '}', '&', '*', '!', '$', '1', '#'),
      }),
    );
    fc.assert(
      fc.property(doc, (text) => {
        loadsOrConfigError(() => parseConfig(text, { dir: DIR, env: ENV }));
      }),
      { numRuns: 400 },
    );
  });
});
