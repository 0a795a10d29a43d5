import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/observability/logger.js';

const SECRETS = ['S3cr3t-pw', 'hook-secret-xyz'];

function capture(): { stream: Writable; text: () => string } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer | string, _enc, done) {
      chunks.push(chunk.toString());
      done();
    },
  });
  return { stream, text: () => chunks.join('') };
}

function logEverything(logger: ReturnType<typeof createLogger>): void {
  logger.info({ config: { sources: [{ name: 'scheduling', password: 'S3cr3t-pw' }] } }, 'effective config');
  logger.info({ sink: { name: 'hook', secret: 'hook-secret-xyz' } }, 'sink opened');
  logger.warn('login with S3cr3t-pw refused for scheduling');
  logger.info(
    {
      req: {
        url: 'http://127.0.0.1:4010/scheduling/api/events',
        headers: { authorization: 'Digest username="alice", response="6629fae4"' },
      },
    },
    'request',
  );
  logger.info({ headers: { authorization: 'Basic YWxpY2U6UzNjcjN0LXB3' } }, 'basic');
  logger.info({ authorization: 'Bearer tok-abc-123' }, 'bearer');
  logger.info({ queue: { redis_url: 'redis://default:S3cr3t-pw@127.0.0.1:6379/0' } }, 'queue');
  logger.info({ redis_url: 'redis://:other-redis-pass@10.0.0.1:6379' }, 'top-level redis url');
  logger.error(
    { err: new Error('connect to redis://user:hook-secret-xyz@127.0.0.1:6379 failed') },
    'redis down',
  );
  logger.info({ deep: { a: { b: { c: { d: ['x', { token: 'hook-secret-xyz' }] } } } } }, 'deep');
  logger.info(
    { link: 'https://bob:unknown-pass@example.invalid/hooks' },
    'userinfo of a URL with an unlisted password',
  );
}

describe('createLogger', () => {
  it('never writes a credential, whatever shape it is logged in', () => {
    const out = capture();
    const logger = createLogger({ level: 'info', secrets: SECRETS, destination: out.stream });
    logEverything(logger);
    const text = out.text();
    const lines = text.trim().split('\n');
    expect(lines).toHaveLength(11);
    for (const line of lines) expect(() => JSON.parse(line), line).not.toThrow();
    for (const secret of [
      ...SECRETS,
      'Digest username',
      'YWxpY2U6UzNjcjN0LXB3',
      'tok-abc-123',
      'other-redis-pass',
      'unknown-pass',
    ]) {
      expect(text).not.toContain(secret);
    }
    expect(text).toContain('<redacted>');
    // What is not secret survives.
    const parsed = lines.map((l) => JSON.parse(l) as Record<string, any>);
    expect(parsed[0]!.config.sources[0].name).toBe('scheduling');
    expect(parsed[2]!.msg).toBe('login with <redacted> refused for scheduling');
    expect(parsed[3]!.req.url).toBe('http://127.0.0.1:4010/scheduling/api/events');
    expect(parsed[6]!.queue.redis_url).toBe('<redacted>');
    expect(parsed[10]!.link).toBe('https://<redacted>@example.invalid/hooks');
  });

  it('also redacts secrets that need JSON escaping', () => {
    const out = capture();
    const tricky = 'pa"ss\\word';
    const logger = createLogger({ level: 'info', secrets: [tricky], destination: out.stream });
    logger.info({ note: `value ${tricky} here` }, `message ${tricky}`);
    const line = JSON.parse(out.text()) as { note: string; msg: string };
    expect(line.note).toBe('value <redacted> here');
    expect(line.msg).toBe('message <redacted>');
  });

  it('redacts in pretty output too', async () => {
    const out = capture();
    const logger = createLogger({ level: 'info', pretty: true, secrets: SECRETS, destination: out.stream });
    logEverything(logger);
    await new Promise((r) => setImmediate(r));
    const text = out.text();
    expect(text).toContain('effective config');
    expect(text).toContain('INFO');
    for (const secret of SECRETS) expect(text).not.toContain(secret);
  });

  it('honours the level and rejects an unknown one naming the key', () => {
    const out = capture();
    const logger = createLogger({ level: 'warn', destination: out.stream });
    logger.info('hidden');
    logger.warn('shown');
    expect(out.text()).not.toContain('hidden');
    expect(out.text()).toContain('shown');
    expect(() => createLogger({ level: 'verbose' })).toThrow(/log\.level: unknown level "verbose"/);
  });

  it('writes JSON lines to a file descriptor', () => {
    const dir = mkdtempSync(join(tmpdir(), 'feedsync-log-'));
    try {
      const fd = openSync(join(dir, 'out.log'), 'w');
      const logger = createLogger({ level: 'info', secrets: SECRETS, destination: fd });
      logger.info({ source: 'scheduling' }, 'hello S3cr3t-pw');
      logger.flush();
      closeSync(fd);
      const line = JSON.parse(readFileSync(join(dir, 'out.log'), 'utf8')) as {
        msg: string;
        source: string;
        level: number;
      };
      expect(line).toMatchObject({ msg: 'hello <redacted>', source: 'scheduling', level: 30 });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
