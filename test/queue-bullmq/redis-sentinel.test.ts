// queue.redis_url in redis+sentinel:// form: parsed into ioredis' Sentinel options, accepted by the
// config schema, and never shown with its password.
import { describe, expect, it } from 'vitest';
import { redactRedisUrl, checkRedisUrl } from '../../src/queue/bullmq/redis.js';
import { parseSentinelUrl } from '../../src/queue/bullmq/redis-sentinel.js';
import { validateConfig } from '../../src/config/load.js';
import { configError, minimalRaw } from '../config/helpers.js';

describe('redis+sentinel:// URLs', () => {
  it('parses sentinels, master name and credentials', () => {
    expect(
      parseSentinelUrl('redis+sentinel://u:p%40ss@10.0.0.1:26379,[::1]:26380,sentinel-c/mymaster'),
    ).toEqual({
      sentinels: [
        { host: '10.0.0.1', port: 26379 },
        { host: '::1', port: 26380 },
        { host: 'sentinel-c', port: 26379 },
      ],
      name: 'mymaster',
      username: 'u',
      password: 'p@ss',
    });
    expect(parseSentinelUrl('redis+sentinel://:secret@h:1/m')).toEqual({
      sentinels: [{ host: 'h', port: 1 }],
      name: 'm',
      password: 'secret',
    });
    for (const bad of [
      'redis+sentinel://h:1',
      'redis+sentinel://h:1/',
      'redis+sentinel://h:99999/m',
      'redis+sentinel://u:pw@/m',
    ])
      expect(() => parseSentinelUrl(bad), bad).toThrow();
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
  });
});
