import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { checkConfig } from '../../src/commands/check-config.js';
import { defaultConfigPath, loadConfigFile } from '../../src/config/load.js';
import { configError, MINIMAL_YAML, tempDir } from './helpers.js';

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = tempDir()));
afterEach(() => cleanup());

function capture() {
  const out: string[] = [];
  const err: string[] = [];
  return { out, err, outFn: (s: string) => out.push(s), errFn: (s: string) => err.push(s) };
}

describe('check-config', () => {
  it('prints the effective config as YAML with secrets redacted and returns 0', () => {
    const file = join(dir, 'f.yaml');
    writeFileSync(file, MINIMAL_YAML.replace('password: wonderland', 'password: ${PW}'));
    const io = capture();
    expect(checkConfig(file, { PW: 'very-secret-pw' }, io.outFn, io.errFn)).toBe(0);
    expect(io.err).toEqual([]);
    const text = io.out.join('');
    expect(text).not.toContain('very-secret-pw');
    expect(text.split('\n')[0]).toBe(`# effective configuration from ${file} (secrets redacted)`);
    const printed = parse(text);
    expect(printed.sources[0].password).toBe('<redacted>');
    expect(printed.queue.attempts).toBe(10);
    expect(printed.sinks[0].filter).toEqual({
      sources: [],
      services: [],
      event_types: [],
      resource_types: [],
    });
  });

  it('prints every problem and returns 2', () => {
    const file = join(dir, 'f.yaml');
    writeFileSync(file, `${MINIMAL_YAML}\nhttp: { port: 99999 }\nqueue: { driver: bullmq }\n`);
    const io = capture();
    expect(checkConfig(file, {}, io.outFn, io.errFn)).toBe(2);
    expect(io.out).toEqual([]);
    expect(io.err.join('')).toBe(
      `invalid configuration (${file}):\n` +
        '  queue.redis_url: required when queue.driver is bullmq\n' +
        '  http.port: must be <= 65535\n',
    );
  });

  it('writes errors to `out` when no separate error writer is given, and names a missing file', () => {
    const io = capture();
    expect(checkConfig(join(dir, 'nope.yaml'), {}, io.outFn)).toBe(2);
    expect(io.out.join('')).toContain(`config file not found: ${join(dir, 'nope.yaml')}`);
  });
});

describe('config file location', () => {
  it('defaults to $FEEDSYNC_CONFIG, else config/feedsync.yaml', () => {
    expect(defaultConfigPath({ FEEDSYNC_CONFIG: '/etc/feedsync/f.yaml' })).toBe('/etc/feedsync/f.yaml');
    expect(defaultConfigPath({})).toBe('config/feedsync.yaml');
    expect(defaultConfigPath({ FEEDSYNC_CONFIG: '' })).toBe('config/feedsync.yaml');
  });

  it('names an unreadable config file', () => {
    const err = configError(() => loadConfigFile(dir, {}));
    expect(err.message).toBe(`cannot read config file ${dir}: EISDIR`);
  });
});
