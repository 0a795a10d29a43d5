// Every pattern and scanner that reads text an upstream controls runs in time linear in that text:
// each is fed 1 MiB of several adversarial shapes (the runs that make a backtracking regular
// expression try every split) and must finish well under a quadratic growth from 256 KiB, and
// under an absolute bound. A 64 KiB run comes first: a quadratic pattern fails there in about a
// second instead of running for minutes on 1 MiB.
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { parseRetryAfter } from '../../src/backoff.js';
import { cut, quote } from '../../src/core/bounded-text.js';
import { terminalJson, terminalSafe } from '../../src/core/terminal-text.js';
import { createLogger, MAX_LOG_LINE_BYTES } from '../../src/observability/logger.js';
import { createTextRedactor, redactUrlCredentials } from '../../src/observability/redact-text.js';
import { decodeText } from '../../src/upstream/charset.js';
import { normalizeDateTime } from '../../src/upstream/datetime.js';
import { decodeBody } from '../../src/upstream/decode.js';
import { MAX_CHALLENGE_CHARS, parseAuthenticateHeader } from '../../src/upstream/digest.js';

const KiB = 1024;
/** Generous for a loaded 2-core machine: the linear passes take a few ms per MiB. */
const MAX_MS_PER_MIB = 250;
const MAX_MS_64K = 100;

/** `unit` repeated to exactly `n` characters. */
const fill = (unit: string, n: number) => unit.repeat(Math.ceil(n / unit.length)).slice(0, n);

/** The best of three runs, in ms: a slow run is the machine's doing, a fast one the code's. */
function bestOf3(run: () => unknown): number {
  let best = Infinity;
  for (let i = 0; i < 3; i++) {
    const started = performance.now();
    run();
    best = Math.min(best, performance.now() - started);
  }
  return best;
}

type Shape = [name: string, make: (n: number) => string];

function expectLinear(what: string, shapes: Shape[], run: (text: string) => unknown): void {
  for (const [shape, make] of shapes) {
    const label = `${what} on ${shape}`;
    const t64 = bestOf3(() => run(make(64 * KiB)));
    expect(t64, `${label}: 64 KiB took ${t64.toFixed(1)} ms`).toBeLessThan(MAX_MS_64K);
    const small = make(256 * KiB);
    const big = make(1024 * KiB);
    const tSmall = bestOf3(() => run(small));
    const tBig = bestOf3(() => run(big));
    expect(tBig, `${label}: 1 MiB took ${tBig.toFixed(1)} ms`).toBeLessThan(MAX_MS_PER_MIB);
    // Linear: ×4 from 256 KiB to 1 MiB; quadratic: ×16. The factor and the constant absorb the
    // noise of a shared machine on runs of a few milliseconds.
    expect(
      tBig,
      `${label}: 256 KiB ${tSmall.toFixed(1)} ms → 1 MiB ${tBig.toFixed(1)} ms (linear ≈ ×4, quadratic ×16)`,
    ).toBeLessThan(10 * tSmall + 50);
  }
}

/** Shapes that stall a backtracking URL or parameter pattern. */
const URLISH: Shape[] = [
  ['a-a-a-…', (n) => fill('a-', n)],
  ['a://a://…', (n) => fill('a://', n)],
  ['a:/a:/…', (n) => fill('a:/', n)],
  ['a://x@a://x@… (every one a match)', (n) => fill('a://x@', n)],
  ['scheme:// and a userinfo run without @', (n) => `https://${fill('a', n - 8)}`],
  ['a run of scheme characters ending in @', (n) => `${fill('a', n - 1)}@`],
  ['a://a:a:a:… (colons in the userinfo)', (n) => `a://${fill('a:', n - 4)}`],
  ['?password?password… (no =)', (n) => fill('?password', n)],
  ['&token=&token=…', (n) => fill('&token=', n)],
  ['?token= and a value without end', (n) => `?token=${fill('x', n - 7)}`],
  ['JSON-escaped quotes', (n) => fill('\\"a://', n)],
  ['secret near-misses', (n) => fill('S3cr3t-p', n)],
];

describe('linear time on adversarial input', () => {
  it('the log redactor (URL credentials, secrets)', () => {
    const scrub = createTextRedactor(['S3cr3t-pw', 'aaaaaaaaaaaaaaab', 'hook-secret-xyz']);
    expectLinear('createTextRedactor', URLISH, scrub);
    expectLinear('redactUrlCredentials', URLISH, redactUrlCredentials);
  });

  it('a log line carrying huge upstream values, end to end through the logger', () => {
    let written = 0;
    let longest = 0;
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        written += chunk.length;
        longest = Math.max(longest, chunk.length);
        done();
      },
    });
    const logger = createLogger({ level: 'info', secrets: ['S3cr3t-pw'], destination: sink });
    expectLinear('a logged field', URLISH, (text) =>
      logger.warn({ event_type: text, url: text, nested: { deep: [text] } }, text),
    );
    expect(written).toBeGreaterThan(0);
    expect(longest, 'the longest line written (bytes)').toBeLessThanOrEqual(MAX_LOG_LINE_BYTES);
  });

  it('cutting and quoting upstream values', () => {
    expectLinear('cut', URLISH, (t) => cut(t));
    expectLinear('quote', URLISH, (t) => quote(t));
  });

  it('terminal-safe output', () => {
    const shapes: Shape[] = [
      ['ESC [ ESC [ …', (n) => fill('\x1b[', n)],
      ['C1 CSI and bidi overrides', (n) => fill('\u009b\u202e', n)],
      ['plain text', (n) => fill('a-', n)],
    ];
    expectLinear('terminalSafe', shapes, (t) => terminalSafe(t));
    expectLinear('terminalJson', shapes, (t) => terminalJson({ error: t }));
  });

  it('timestamps, Retry-After, WWW-Authenticate, Content-Type and the body sniffing', () => {
    expectLinear(
      'normalizeDateTime',
      [
        ['a long fraction then x', (n) => `2026-01-01T00:00:00.${fill('1', n - 21)}x`],
        ['digits', (n) => fill('1', n)],
        ['a long zone', (n) => `2026-01-01T00:00:00+${fill('1', n - 20)}`],
      ],
      (t) => normalizeDateTime(t, 'utc'),
    );
    expectLinear(
      'parseRetryAfter',
      [
        ['digits then x', (n) => `${fill('1', n - 1)}x`],
        ['+1.111… then x', (n) => `+1.${fill('1', n - 4)}x`],
      ],
      (t) => parseRetryAfter(t, 60_000),
    );
    // A challenge header is bounded (an object per challenge): over the bound it is refused at
    // once; at the bound, the worst shapes parse in a few milliseconds.
    for (const [shape, make] of [
      ['a b=,a b=,… (a scheme and a param each)', (n: number) => fill('a b=,', n)],
      ['one scheme and a token without =', (n: number) => `Digest ${fill('a', n - 7)}`],
      ['schemes and long tokens of spaces', (n: number) => fill('a      b ', n)],
      ['an unterminated quoted string', (n: number) => `Digest realm="${fill('\\"', n - 14)}`],
    ] as Shape[]) {
      const huge = make(1024 * KiB);
      const refused = bestOf3(() => expect(() => parseAuthenticateHeader(huge)).toThrow(/over the 16384/));
      expect(refused, `parseAuthenticateHeader refuses 1 MiB of ${shape} (ms)`).toBeLessThan(MAX_MS_64K);
      const most = make(MAX_CHALLENGE_CHARS);
      const t = bestOf3(() => parseAuthenticateHeader(most));
      expect(t, `parseAuthenticateHeader on 16 KiB of ${shape} (ms)`).toBeLessThan(MAX_MS_64K);
    }
    const body = Buffer.from('{}');
    expectLinear(
      'the charset of a Content-Type',
      [
        [';;;…', (n) => fill(';', n)],
        ['; charset= and spaces', (n) => `; charset=${fill(' ', n - 10)}`],
        ['an unterminated quoted charset', (n) => `;charset="${fill('a', n - 10)}`],
      ],
      (t) => {
        try {
          decodeText(body, t);
        } catch {
          // An unknown charset is refused; the time to find it is what counts.
        }
      },
    );
    expectLinear(
      'the HTML sniffing of a body',
      [
        ['<!doctype and spaces', (n) => `<!doctype${fill(' ', n - 10)}x`],
        ['<html and no end', (n) => `<html${fill('a', n - 5)}`],
      ],
      (t) => {
        try {
          decodeBody(t, 'application/json', 'http://h/x', 'json');
        } catch {
          // Refused as HTML or malformed JSON; the time to decide is what counts.
        }
      },
    );
  });
});
