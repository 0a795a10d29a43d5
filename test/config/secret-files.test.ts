import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadConfigFile, validateConfig } from '../../src/config/load.js';
import { configError, minimalRaw, tempDir } from './helpers.js';

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = tempDir()));
afterEach(() => cleanup());

describe('*_file secrets', () => {
  it('reads password_file, secret_file and redis_url_file, trimmed, relative to the config dir', () => {
    mkdirSync(join(dir, 'secrets'));
    writeFileSync(join(dir, 'secrets', 'pw'), '  s3cret pass \n');
    writeFileSync(join(dir, 'secrets', 'hook'), 'hmac-key\n');
    writeFileSync(join(dir, 'secrets', 'redis'), 'redis://:r3dis@127.0.0.1:6379/0\n');
    writeFileSync(
      join(dir, 'feedsync.yaml'),
      `
queue:
  driver: bullmq
  redis_url_file: secrets/redis
sources:
  - name: sched
    service: scheduling
    base_url: http://127.0.0.1:1/s
    username: u
    password_file: ${join(dir, 'secrets', 'pw')}
sinks:
  - name: hook
    type: webhook
    url: http://127.0.0.1:2/h
    secret_file: ./secrets/hook
`,
    );
    const { config, file } = loadConfigFile(join(dir, 'feedsync.yaml'), {});
    expect(file).toBe(join(dir, 'feedsync.yaml'));
    expect(config.sources[0]!.password).toBe('s3cret pass');
    expect(config.sinks[0]).toMatchObject({ secret: 'hmac-key' });
    expect(config.queue.redis_url).toBe('redis://:r3dis@127.0.0.1:6379/0');
    expect(config.sources[0]).not.toHaveProperty('password_file');
  });

  it('rejects a secret given both ways', () => {
    writeFileSync(join(dir, 'pw'), 'x');
    const raw = minimalRaw();
    raw.sources[0].password_file = 'pw';
    const err = configError(() => validateConfig(raw, { dir }));
    expect(err.path).toBe('sources[0].password_file');
    expect(err.message).toBe('sources[0].password_file: give either password or password_file, not both');
  });

  it('names the key and the file, never the contents, when a file cannot be used', () => {
    writeFileSync(join(dir, 'empty'), ' \n');
    writeFileSync(join(dir, 'locked'), 'topsecret');
    chmodSync(join(dir, 'locked'), 0o000);
    const raw = minimalRaw();
    delete raw.sources[0].password;
    raw.sources[0].password_file = 'missing';
    raw.sources.push({ ...raw.sources[0], name: 'b', password_file: 'empty' });
    raw.sources.push({ ...raw.sources[0], name: 'c', password_file: 42 });
    raw.queue = { driver: 'bullmq', redis_url_file: dir };
    raw.sinks = [{ name: 'hook', type: 'webhook', url: 'http://127.0.0.1/', secret_file: 'locked' }];
    const lines = configError(() => validateConfig(raw, { dir })).message.split('\n');
    // Root can read a 0o000 file; then the secret is read fine and only four problems remain.
    const lockedReadable = process.getuid?.() === 0;
    expect(lines).toEqual([
      `queue.redis_url_file: cannot read ${dir} (EISDIR)`,
      `sources[0].password_file: cannot read ${join(dir, 'missing')} (ENOENT)`,
      `sources[1].password_file: ${join(dir, 'empty')} is empty`,
      'sources[2].password_file: must be a file path, got a number',
      ...(lockedReadable ? [] : [`sinks[0].secret_file: cannot read ${join(dir, 'locked')} (EACCES)`]),
    ]);
    expect(lines.join('\n')).not.toContain('topsecret');
  });

  it('leaves secret_file on non-webhook sinks to be reported as an unknown key', () => {
    writeFileSync(join(dir, 's'), 'x');
    const raw = minimalRaw();
    raw.sinks[0].secret_file = 's';
    expect(configError(() => validateConfig(raw, { dir })).message).toBe('sinks[0].secret_file: unknown key');
  });

  it('does not modify the caller’s object', () => {
    writeFileSync(join(dir, 'pw'), 'from-file');
    const raw = minimalRaw();
    delete raw.sources[0].password;
    raw.sources[0].password_file = 'pw';
    const before = structuredClone(raw);
    expect(validateConfig(raw, { dir }).sources[0]!.password).toBe('from-file');
    expect(raw).toEqual(before);
  });
});
