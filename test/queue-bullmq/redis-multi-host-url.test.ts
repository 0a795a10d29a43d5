// queue.redis_url in redis+sentinel:// and redis+cluster:// forms: parsed into ioredis' Sentinel
// and Cluster options, accepted by the config schema, and never shown with their password.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { redactRedisUrl, checkRedisUrl } from '../../src/queue/bullmq/redis.js';
import { parseMultiHostUrl } from '../../src/queue/bullmq/redis-multi-host.js';
import { validateConfig } from '../../src/config/load.js';
import { configError, minimalRaw } from '../config/helpers.js';

describe('redis+sentinel:// URLs', () => {
  it('parses sentinels, master name and credentials', () => {
    expect(
      parseMultiHostUrl('redis+sentinel://u:p%40ss@10.0.0.1:26379,[::1]:26380,sentinel-c/mymaster'),
    ).toEqual({
      kind: 'sentinel',
      tls: false,
      hosts: [
        { host: '10.0.0.1', port: 26379 },
        { host: '::1', port: 26380 },
        { host: 'sentinel-c', port: 26379 },
      ],
      name: 'mymaster',
      username: 'u',
      password: 'p@ss',
    });
    expect(parseMultiHostUrl('rediss+sentinel://:secret@h:1/m')).toEqual({
      kind: 'sentinel',
      tls: true,
      hosts: [{ host: 'h', port: 1 }],
      name: 'm',
      password: 'secret',
    });
    expect(parseMultiHostUrl('redis+sentinel://h:1/m/3')).toEqual({
      kind: 'sentinel',
      tls: false,
      hosts: [{ host: 'h', port: 1 }],
      name: 'm',
      db: 3,
    });
    expect(redactRedisUrl('redis+sentinel://:pw@h:1/m/3')).toBe('redis+sentinel://h:1/m/3');
    for (const bad of [
      'redis+sentinel://h:1/m/x',
      'redis+sentinel://h:1',
      'redis+sentinel://h:1/',
      'redis+sentinel://h:99999/m',
      'redis+sentinel://u:pw@/m',
    ])
      expect(() => parseMultiHostUrl(bad), bad).toThrow();
  });

  it('parses cluster seed nodes and credentials; a master name is not part of the form', () => {
    expect(parseMultiHostUrl('redis+cluster://feedsync:p%40ss@10.0.0.1:7000,10.0.0.2,[::1]:7002')).toEqual({
      kind: 'cluster',
      tls: false,
      hosts: [
        { host: '10.0.0.1', port: 7000 },
        { host: '10.0.0.2', port: 6379 },
        { host: '::1', port: 7002 },
      ],
      username: 'feedsync',
      password: 'p@ss',
    });
    expect(parseMultiHostUrl('rediss+cluster://:tok@cfg.example.cache.amazonaws.com:6379/')).toEqual({
      kind: 'cluster',
      tls: true,
      hosts: [{ host: 'cfg.example.cache.amazonaws.com', port: 6379 }],
      password: 'tok',
    });
    for (const bad of [
      'redis+cluster://',
      'redis+cluster://h:1/m',
      'redis+cluster://h:0',
      'redis+cluster://u:pw@',
    ])
      expect(() => parseMultiHostUrl(bad), bad).toThrow();
    expect(redactRedisUrl('rediss+cluster://u:hunter2@a:7000,b:7001')).toBe('rediss+cluster://a:7000,b:7001');
    expect(redactRedisUrl('redis+cluster://u:hunter2@')).not.toContain('hunter2');
  });

  it('never shows the password', () => {
    expect(redactRedisUrl('redis+sentinel://feedsync:hunter2@a:26379,b:26380/main')).toBe(
      'redis+sentinel://a:26379,b:26380/main',
    );
    expect(redactRedisUrl('redis+sentinel://x:hunter2@')).not.toContain('hunter2');
    expect(() => checkRedisUrl('redis+sentinel://x:hunter2@h:1')).toThrow(/queue.redis_url/);
    try {
      checkRedisUrl('redis+sentinel://x:hunter2@h:1');
    } catch (err) {
      expect(String(err)).not.toContain('hunter2');
    }
  });

  it('is accepted by the config schema as queue.redis_url; a malformed one is refused without echoing it', () => {
    const validate = (redis_url: string) =>
      validateConfig({ ...minimalRaw(), queue: { driver: 'bullmq', redis_url } }, { dir: '/etc/feedsync' });
    const url = 'redis+sentinel://:pw@127.0.0.1:26379,127.0.0.1:26380/feedsync';
    expect(validate(url).queue.redis_url).toBe(url);
    const message = configError(() => validate('redis+sentinel://:hunter2@127.0.0.1:26379')).message;
    expect(message).not.toContain('hunter2');
    expect(message).toContain('redis+sentinel://[user:password@]host:port');
    expect(message).toContain('redis+cluster://[user:password@]host:port');
    const cluster = 'rediss+cluster://:pw@127.0.0.1:7000,127.0.0.1:7001';
    expect(validate(cluster).queue.redis_url).toBe(cluster);
    // queue.redis_tls goes with the TLS forms only (a plain form would send the password in clear).
    const dir = mkdtempSync(join(tmpdir(), 'feedsync-tls-schema-'));
    writeFileSync(join(dir, 'ca.pem'), '-----BEGIN CERTIFICATE-----\n');
    const withTls = (redis_url: string) =>
      validateConfig(
        { ...minimalRaw(), queue: { driver: 'bullmq', redis_url, redis_tls: { ca_file: 'ca.pem' } } },
        { dir },
      );
    expect(withTls(cluster).queue.redis_tls?.ca_file).toBeDefined();
    expect(withTls('rediss+sentinel://h:1/m').queue.redis_tls?.ca_file).toBeDefined();
    expect(configError(() => withTls('redis+cluster://:hunter2@h:1')).message).toMatch(/needs a rediss/);
  });
});
