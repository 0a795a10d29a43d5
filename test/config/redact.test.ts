import { describe, expect, it } from 'vitest';
import { validateConfig } from '../../src/config/load.js';
import { collectSecrets, redactConfig, redactUrlPassword } from '../../src/config/redact.js';
import { minimalRaw } from './helpers.js';

function configWithSecrets() {
  const raw = minimalRaw();
  raw.sources[0].password = 'src-pass-1';
  raw.sources.push({ ...raw.sources[0], name: 'wf', service: 'workflow', password: 'src-pass-2' });
  raw.queue = { driver: 'bullmq', redis_url: 'redis://feedsync:p%40ss%2Fw0rd@127.0.0.1:6379/2' };
  raw.sinks.push(
    { name: 'hook', type: 'webhook', url: 'https://bot:hookpw@example.test/h?x=1', secret: 'hmac-secret' },
    { name: 'plain', type: 'webhook', url: 'https://example.test/p' },
    {
      name: 'mine',
      type: 'module',
      module: './m.js',
      options: {
        api_token: 'tok-123',
        nested: { password: 'deep-pw', list: [{ secret: 'in-list' }] },
        size: 3,
      },
    },
  );
  return validateConfig(raw, { dir: '/etc/feedsync' });
}

describe('redaction', () => {
  it('collects the password of a Sentinel or cluster URL (several hosts: not a WHATWG URL) for log scrubbing', () => {
    for (const redis_url of [
      'redis+cluster://feedsync:cl%40ster-pw@10.0.0.1:7000,10.0.0.2:7000',
      'rediss+sentinel://feedsync:cl%40ster-pw@s1:26379,s2:26379/main',
    ]) {
      const raw = minimalRaw();
      raw.queue = { driver: 'bullmq', redis_url };
      const secrets = collectSecrets(validateConfig(raw, { dir: '/etc/feedsync' }));
      expect(secrets).toEqual(expect.arrayContaining(['cl%40ster-pw', 'cl@ster-pw', redis_url]));
      expect(JSON.stringify(redactConfig(validateConfig(raw, { dir: '/etc/feedsync' })))).not.toContain(
        'ster-pw',
      );
    }
  });

  it("redacts and collects the sentinels' own password; it goes only with a Sentinel URL", () => {
    const raw = minimalRaw();
    raw.queue = {
      driver: 'bullmq',
      redis_url: 'redis+sentinel://s1:26379/main',
      redis_sentinel_password: 'sentinel-only-pw',
    };
    const config = validateConfig(raw, { dir: '/etc/feedsync' });
    expect(collectSecrets(config)).toContain('sentinel-only-pw');
    expect(JSON.stringify(redactConfig(config))).not.toContain('sentinel-only-pw');
    raw.queue.redis_url = 'redis://h:6379';
    expect(() => validateConfig(raw, { dir: '/etc/feedsync' })).toThrow(
      /redis_sentinel_password: only with a redis\+sentinel:\/\/ queue\.redis_url/,
    );
  });

  it('leaves no secret value anywhere in the redacted copy and keeps the rest', () => {
    const config = configWithSecrets();
    const secrets = collectSecrets(config);
    expect(new Set(secrets)).toEqual(
      new Set([
        'src-pass-1',
        'src-pass-2',
        'p%40ss%2Fw0rd',
        'p@ss/w0rd',
        'hookpw',
        'hmac-secret',
        'tok-123',
        'deep-pw',
        'in-list',
      ]),
    );
    const text = JSON.stringify(redactConfig(config));
    for (const secret of secrets) expect(text).not.toContain(secret);
    const redacted = redactConfig(config) as any;
    expect(redacted.sources[0].password).toBe('<redacted>');
    expect(redacted.sources[0].username).toBe('alice');
    expect(redacted.queue.redis_url).toBe('redis://feedsync:<redacted>@127.0.0.1:6379/2');
    expect(redacted.sinks[1].url).toBe('https://bot:<redacted>@example.test/h?x=1');
    expect(redacted.sinks[1].secret).toBe('<redacted>');
    expect(redacted.sinks[2]).not.toHaveProperty('secret');
    expect(redacted.sinks[3].options).toEqual({
      api_token: '<redacted>',
      nested: { password: '<redacted>', list: [{ secret: '<redacted>' }] },
      size: 3,
    });
  });

  it('is a deep copy: the config itself is untouched', () => {
    const config = configWithSecrets();
    const before = structuredClone(config);
    redactConfig(config);
    expect(config).toEqual(before);
  });

  it('redacts URL passwords at the last @ of the authority, or the whole string when unsure', () => {
    expect(redactUrlPassword('redis://127.0.0.1:6379')).toBe('redis://127.0.0.1:6379');
    expect(redactUrlPassword('redis://:pw@h:1/0')).toBe('redis://:<redacted>@h:1/0');
    expect(redactUrlPassword('redis://u:a@b@h:1')).toBe('redis://u:<redacted>@h:1');
    expect(redactUrlPassword('redis://u:o@localhost')).toBe('<redacted>');
    expect(redactUrlPassword('not a url with pw')).toBe('<redacted>');
  });

  it('redacts and collects credentials in URL query parameters (a Redis ?password=, a webhook ?token=, module options)', () => {
    const raw = minimalRaw();
    raw.queue = { driver: 'bullmq', redis_url: 'redis://127.0.0.1:6379/0?password=redis-q-pw&db=2' };
    raw.sinks.push(
      { name: 'hook', type: 'webhook', url: 'https://hooks.example.test/in?token=hook-q-tok&team=ops' },
      { name: 'pg', type: 'postgres', url: 'postgres://u@db.example.test/app?password=pg-q-pw' },
      {
        name: 'mine',
        type: 'module',
        module: './m.js',
        options: { endpoint: 'https://api.example.test/v1?api_key=mod-q-key&region=eu' },
      },
    );
    const config = validateConfig(raw, { dir: '/etc/feedsync' });
    const secrets = collectSecrets(config);
    expect(secrets).toEqual(expect.arrayContaining(['redis-q-pw', 'hook-q-tok', 'pg-q-pw']));
    const shown = redactConfig(config) as any;
    const text = JSON.stringify(shown);
    for (const secret of ['redis-q-pw', 'hook-q-tok', 'pg-q-pw', 'mod-q-key'])
      expect(text).not.toContain(secret);
    expect(shown.queue.redis_url).toBe('redis://127.0.0.1:6379/0?password=<redacted>&db=2');
    expect(shown.sinks.find((s: any) => s.name === 'hook').url).toBe(
      'https://hooks.example.test/in?token=<redacted>&team=ops',
    );
    expect(shown.sinks.find((s: any) => s.name === 'mine').options.endpoint).toBe(
      'https://api.example.test/v1?api_key=<redacted>&region=eu',
    );
  });
});
