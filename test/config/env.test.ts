import { describe, expect, it } from 'vitest';
import { parseDocument } from 'yaml';
import { resolvePlainScalar, substituteEnv } from '../../src/config/env.js';
import { parseConfig } from '../../src/config/load.js';
import { configError } from './helpers.js';

const BASE = `
sources:
  - name: sched
    service: scheduling
    base_url: \${BASE}/scheduling
    username: \${USER_NAME}
    password: \${PW}
    expand_subject: \${EXPAND}
    start_from: \${START}
    poll_interval_ms: \${POLL}
sinks:
  - name: file
    type: jsonl
    path: \${OUT_DIR}/changes-\${SUFFIX}.jsonl
http:
  port: \${METRICS_PORT}
`;
const ENV = {
  BASE: 'http://127.0.0.1:4010',
  USER_NAME: 'alice',
  PW: 'p: #not a comment',
  EXPAND: 'false',
  START: '42',
  POLL: '0x10',
  OUT_DIR: '/var/out',
  SUFFIX: 'a',
  METRICS_PORT: '9100',
};

describe('${NAME} substitution', () => {
  it('substitutes inside strings and types whole plain scalars as YAML would', () => {
    const { config } = parseConfig(BASE, { dir: '/tmp', env: ENV });
    const source = config.sources[0]!;
    expect(source.base_url).toBe('http://127.0.0.1:4010/scheduling');
    expect(source.username).toBe('alice');
    // Substitution happens after parsing: YAML syntax inside a value stays text.
    expect(source.password).toBe('p: #not a comment');
    expect(source.expand_subject).toBe(false);
    expect(source.start_from).toBe(42);
    expect(source.poll_interval_ms).toBe(16);
    expect(config.http.port).toBe(9100);
    expect(config.sinks[0]).toMatchObject({ path: '/var/out/changes-a.jsonl' });
  });

  it('keeps a quoted whole reference a string, so digit-only passwords survive', () => {
    const yaml = BASE.replace('password: ${PW}', 'password: "${PW}"');
    const { config } = parseConfig(yaml, { dir: '/tmp', env: { ...ENV, PW: '12345' } });
    expect(config.sources[0]!.password).toBe('12345');
    const err = configError(() => parseConfig(BASE, { dir: '/tmp', env: { ...ENV, PW: '12345' } }));
    expect(err.path).toBe('sources[0].password');
    expect(err.message).toContain('must be a string, got a number');
    expect(err.message).not.toContain('12345');
  });

  it('reports every unset variable with its key path, never other values', () => {
    const env = { ...ENV } as Record<string, string | undefined>;
    delete env.PW;
    delete env.METRICS_PORT;
    const err = configError(() => parseConfig(BASE, { dir: '/tmp', env }));
    expect(err.path).toBe('sources[0].password');
    expect(err.message.split('\n')).toEqual([
      'sources[0].password: environment variable PW is not set',
      'http.port: environment variable METRICS_PORT is not set',
    ]);
  });

  it('treats $${NAME} as a literal and rejects malformed references', () => {
    const yaml = BASE.replace('username: ${USER_NAME}', () => 'username: user-$${USER_NAME}');
    const { config } = parseConfig(yaml, { dir: '/tmp', env: ENV });
    expect(config.sources[0]!.username).toBe('user-${USER_NAME}');
    const bad = BASE.replace('username: ${USER_NAME}', 'username: x${1BAD}');
    const err = configError(() => parseConfig(bad, { dir: '/tmp', env: ENV }));
    expect(err.path).toBe('sources[0].username');
    expect(err.message).toContain('invalid environment variable reference "${1BAD}"');
  });

  it('substitutes an anchored value once and its aliases see the result', () => {
    const yaml = `${BASE}
store:
  path: &dir \${OUT_DIR}
log:
  level: &lvl \${LEVEL}
sinks:
  - name: a
    type: jsonl
    path: *dir
  - name: b
    type: sqlite
    path: *dir
`.replace(/\nsinks:\n {2}- name: file\n {4}type: jsonl\n {4}path: .*\n/, '\n');
    const { config } = parseConfig(yaml, { dir: '/tmp', env: { ...ENV, LEVEL: 'debug' } });
    expect(config.store.path).toBe('/var/out');
    expect(config.sinks.map((s) => ('path' in s ? s.path : null))).toEqual(['/var/out', '/var/out']);
    expect(config.log.level).toBe('debug');
  });

  it('does not substitute inside keys', () => {
    const yaml = `
sources:
  - name: sched
    service: scheduling
    base_url: http://127.0.0.1:1/s
    username: u
    password: \${PW}
sinks:
  - name: file
    type: jsonl
    path: out
\${NOT_A_VALUE}: 1
`;
    const err = configError(() => parseConfig(yaml, { dir: '/tmp', env: { PW: 'x' } }));
    expect(err.message).toBe('${NOT_A_VALUE}: unknown key');
  });

  it('resolves plain scalars like the YAML core schema', () => {
    expect(resolvePlainScalar('true')).toBe(true);
    expect(resolvePlainScalar('FALSE')).toBe(false);
    expect(resolvePlainScalar('')).toBeNull();
    expect(resolvePlainScalar('~')).toBeNull();
    expect(resolvePlainScalar('-12')).toBe(-12);
    expect(resolvePlainScalar('0o17')).toBe(15);
    expect(resolvePlainScalar('1.5e3')).toBe(1500);
    expect(resolvePlainScalar('yes')).toBe('yes');
    expect(resolvePlainScalar('[1, 2]')).toBe('[1, 2]');
    expect(resolvePlainScalar('a: b')).toBe('a: b');
  });
});

describe('${NAME:-default} substitution', () => {
  const substituted = (yaml: string, env: Record<string, string>) => {
    const doc = parseDocument(yaml);
    substituteEnv(doc, env);
    return doc.toJS() as Record<string, unknown>;
  };

  it('uses the default when NAME is unset or empty, typed like a plain scalar', () => {
    const yaml = BASE.replace('${BASE}', '${BASE:-http://127.0.0.1:4999}')
      .replace('${POLL}', '${POLL:-250}')
      .replace('${EXPAND}', '${EXPAND:-false}')
      .replace('${METRICS_PORT}', '${METRICS_PORT:-9100}');
    const env: Record<string, string> = { ...ENV, POLL: '' };
    delete env.BASE;
    delete env.EXPAND;
    delete env.METRICS_PORT;
    const { config } = parseConfig(yaml, { dir: '/tmp', env });
    const source = config.sources[0]!;
    expect(source.base_url).toBe('http://127.0.0.1:4999/scheduling');
    expect(source.poll_interval_ms).toBe(250);
    expect(source.expand_subject).toBe(false);
    expect(config.http.port).toBe(9100);
  });

  it('uses the variable when it is set and not empty', () => {
    const yaml = BASE.replace('${POLL}', '${POLL:-250}').replace('${PW}', '"${PW:-fallback}"');
    const { config } = parseConfig(yaml, { dir: '/tmp', env: { ...ENV, POLL: '750', PW: '0042' } });
    expect(config.sources[0]!.poll_interval_ms).toBe(750);
    expect(config.sources[0]!.password).toBe('0042');
  });

  it('${NAME:-} is the empty string, plain or quoted, whole or inside a value', () => {
    expect(substituted('a: ${X:-}\nb: "${X:-}"\nc: pre-${X:-}-post\n', {})).toEqual({
      a: '',
      b: '',
      c: 'pre--post',
    });
  });

  it('keeps a default with colons, slashes and spaces as text', () => {
    expect(substituted('url: ${URL:-redis://h:6379/0}\nmsg: "${MSG:-a b: c}"\nn: ${N:-007}\n', {})).toEqual({
      url: 'redis://h:6379/0',
      msg: 'a b: c',
      n: 7,
    });
  });

  it('an unset ${NAME} beside defaulted ones is still the only error', () => {
    const yaml = BASE.replace('${POLL}', '${POLL:-250}');
    const env: Record<string, string> = { ...ENV };
    delete env.POLL;
    delete env.PW;
    const err = configError(() => parseConfig(yaml, { dir: '/tmp', env }));
    expect(err.message.split('\n')).toEqual(['sources[0].password: environment variable PW is not set']);
  });

  it('rejects a malformed name before the default', () => {
    for (const bad of ['${1BAD:-x}', '${:-x}', '${A-x}', '${A:x}']) {
      const yaml = BASE.replace('username: ${USER_NAME}', () => `username: ${bad}`);
      const err = configError(() => parseConfig(yaml, { dir: '/tmp', env: ENV }));
      expect(err.path, bad).toBe('sources[0].username');
      expect(err.message).toContain(`invalid environment variable reference "${bad}"`);
    }
  });
});
