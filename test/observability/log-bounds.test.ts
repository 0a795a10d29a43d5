// What the text redactor scrubs, how upstream values are cut, and the logger's bounds: no field over
// MAX_LOG_FIELD_CHARS, no line over MAX_LOG_LINE_BYTES, and no part of a credential shown where a
// cut falls in one.
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { cut, MAX_SHOWN_CHARS, quote } from '../../src/core/bounded-text.js';
import { terminalJson, terminalSafe } from '../../src/core/terminal-text.js';
import { createLogger, MAX_LOG_FIELD_CHARS, MAX_LOG_LINE_BYTES } from '../../src/observability/logger.js';
import { createTextRedactor, redactUrlCredentials } from '../../src/observability/redact-text.js';

function capture(): { stream: Writable; lines: () => string[] } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer | string, _enc, done) {
      chunks.push(chunk.toString());
      done();
    },
  });
  return { stream, lines: () => chunks.join('').split('\n').filter(Boolean) };
}

describe('redactUrlCredentials', () => {
  it('redacts userinfo and credential query parameters, and nothing else', () => {
    const cases: [string, string][] = [
      ['connect redis://user:pw@10.0.0.1:6379 failed', 'connect redis://<redacted>@10.0.0.1:6379 failed'],
      ['"https://bob:x@h/a"', '"https://<redacted>@h/a"'],
      ['redis://h:6379/0?password=s3cr3t', 'redis://h:6379/0?password=<redacted>'],
      [
        'https://h/hook?token=abc&team=ops&sig=zz#frag',
        'https://h/hook?token=<redacted>&team=ops&sig=<redacted>#frag',
      ],
      [
        'GET /x?X-Amz-Signature=f00&X-Amz-Credential=AK/1&api_key=k&apiKey=k2&client_secret=c&key=v&auth=a',
        'GET /x?X-Amz-Signature=<redacted>&X-Amz-Credential=<redacted>&api_key=<redacted>&apiKey=<redacted>' +
          '&client_secret=<redacted>&key=<redacted>&auth=<redacted>',
      ],
      ['postgres://h/db?sslmode=require&password=p"', 'postgres://h/db?sslmode=require&password=<redacted>"'],
      // Not credentials: left alone.
      ['mailto:ops@example.test', 'mailto:ops@example.test'],
      ['https://h/a?page=2&newer_than=5&author=x', 'https://h/a?page=2&newer_than=5&author=x'],
      ['user@host and a://b c@d', 'user@host and a://b c@d'],
      ['?token= (empty)', '?token= (empty)'],
    ];
    for (const [text, want] of cases) expect(redactUrlCredentials(text), text).toBe(want);
  });

  it('the redactor replaces secrets in every form, then URL credentials', () => {
    const scrub = createTextRedactor(['pa"ss\\word', 'p@ss/w0rd', 'ab']);
    expect(scrub('a pa"ss\\word b')).toBe('a <redacted> b');
    expect(scrub('json "pa\\"ss\\\\word"')).toBe('json "<redacted>"');
    expect(scrub('url p%40ss%2Fw0rd')).toBe('url <redacted>');
    expect(scrub('short ab kept')).toBe('short ab kept');
    // The longest form: 'pa%22ss%5Cword'.
    expect(scrub.reach).toBe(encodeURIComponent('pa"ss\\word').length);
  });
});

describe('cut and quote', () => {
  it('keeps short text, cuts long text with a note, never half a surrogate pair', () => {
    expect(cut('abc')).toBe('abc');
    const long = 'x'.repeat(10_000);
    expect(cut(long)).toBe(`${'x'.repeat(MAX_SHOWN_CHARS)}…[${10_000 - MAX_SHOWN_CHARS} more characters]`);
    expect(cut(cut(long)), 'a cut text is not cut again').toBe(cut(long));
    const emoji = `${'x'.repeat(MAX_SHOWN_CHARS - 1)}😀${'y'.repeat(500)}`;
    expect(cut(emoji).startsWith(`${'x'.repeat(MAX_SHOWN_CHARS - 1)}…`)).toBe(true);
  });

  it('drops a URL authority the cut falls in: it may be userinfo whose @ was cut off', () => {
    const text = `see ${'x'.repeat(MAX_SHOWN_CHARS - 20)} https://user:${'p'.repeat(200)}@host/x`;
    const shown = cut(text);
    expect(shown).not.toContain('user:');
    expect(shown).toMatch(/ https:\/\/…\[\d+ more characters\]$/);
  });

  it('quotes values of any type without serializing them whole', () => {
    expect(quote('a"b')).toBe('"a\\"b"');
    expect(quote(42)).toBe('42');
    expect(quote(null)).toBe('null');
    expect(quote(undefined)).toBe('nothing');
    expect(quote({ a: 'x'.repeat(1e6) })).toBe('an object');
    expect(quote(['x'])).toBe('a list');
    expect(quote('x'.repeat(1e6)).length).toBeLessThan(MAX_SHOWN_CHARS + 64);
  });
});

describe('terminal text', () => {
  it('escapes controls, C1, bidi overrides and separators; keeps line feeds only when asked', () => {
    expect(terminalSafe('a\x1b[2Jb\u009b1m\u202ec\td\ne\u2028')).toBe(
      'a\\x1b[2Jb\\x9b1m\\u202ec\\td\\ne\\u2028',
    );
    expect(terminalSafe('one\ntwo\x07', { newlines: true })).toBe('one\ntwo\\x07');
    expect(terminalSafe('plain text, ünïcode ok')).toBe('plain text, ünïcode ok');
    const value = { text: 'x\u009b\u202e\x1by\x7f' };
    const json = terminalJson(value, 2);
    expect(json).toContain('\\u009b\\u202e\\u001by\\u007f');
    expect(JSON.parse(json)).toEqual(value);
  });
});

describe('the logger bounds what it writes', () => {
  it('cuts every field and the message, and no line exceeds MAX_LOG_LINE_BYTES', () => {
    const out = capture();
    const logger = createLogger({ level: 'info', destination: out.stream });
    const huge = 'a-'.repeat(500_000);
    logger.warn({ event_type: huge, nested: { list: [huge, huge] } }, huge);
    logger.error(new Error(`boom ${huge}`));
    logger.info({
      many: Object.fromEntries(Array.from({ length: 500 }, (_, i) => [`k${i}`, 'v'.repeat(200)])),
    });
    logger.info({ wide: Array.from({ length: 5000 }, (_, i) => i) }, 'a long list');
    const lines = out.lines();
    expect(lines).toHaveLength(4);
    for (const line of lines) {
      expect(Buffer.byteLength(line) + 1, line.slice(0, 200)).toBeLessThanOrEqual(MAX_LOG_LINE_BYTES);
      expect(() => JSON.parse(line)).not.toThrow();
    }
    const [first, second, third, fourth] = lines.map((l) => JSON.parse(l) as Record<string, any>);
    expect(first!.msg.length).toBeLessThanOrEqual(MAX_LOG_FIELD_CHARS + 64);
    expect(first!.msg).toMatch(/more characters\]$/);
    expect(first!.event_type.length).toBeLessThanOrEqual(MAX_LOG_FIELD_CHARS + 64);
    expect(second!.msg).toMatch(/^boom a-a-/);
    expect(second!.err.type).toBe('Error');
    expect(second!.err.message).toMatch(/more characters\]$/);
    expect(third!.log_line_cut, 'a line cut down says so').toBeGreaterThan(MAX_LOG_LINE_BYTES);
    expect(fourth!.wide).toHaveLength(101);
    expect(fourth!.wide[100]).toBe('…[4900 more items]');
  });

  it('never shows part of a secret or of a URL userinfo that a cut falls in', () => {
    const secret = 'S3cr3t-Straddle-0123456789-end';
    const out = capture();
    const logger = createLogger({ level: 'info', secrets: [secret], destination: out.stream });
    const pad = 'x'.repeat(MAX_LOG_FIELD_CHARS - 10);
    logger.info({ a: `${pad}${secret} and more text after it` }, 'secret across the cut');
    logger.info({ b: `${pad} https://user:${'p'.repeat(300)}@host/x` }, 'userinfo across the cut');
    const text = out.lines().join('\n');
    expect(text).not.toContain('S3cr3t');
    expect(text).not.toContain('user:pp');
    expect(text).toContain('<redacted>');
  });

  it('pretty output for a terminal writes control characters as escapes', async () => {
    const out = capture();
    const logger = createLogger({ level: 'info', pretty: true, destination: out.stream });
    logger.warn({ event_type: 'job\x1b]0;title\x07\u202e' }, 'event type not in the spec \x1b[2J');
    await new Promise((r) => setImmediate(r));
    const text = out.lines().join('\n');
    expect(text).toContain('event type not in the spec \\x1b[2J');
    expect(text).toContain('job\\x1b]0;title\\x07\\u202e');
    expect(text).not.toContain('\x1b]0;');
    expect(text).not.toContain('\u202e');
  });
});
