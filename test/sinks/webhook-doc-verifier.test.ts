// The verifier docs/webhook-signatures.md gives receivers (the block fenced as
// `js verify-webhook.mjs`), run as written: it accepts requests the real webhook sink signed and
// returns false, never throwing, for everything else: a wrong secret, a tampered body, a stale or
// future timestamp, and hostile headers (absent, repeated, garbage, non-ASCII of the right length).
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { IncomingHttpHeaders } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openWebhookSink } from '../../src/sinks/webhook.js';
import { makeChange, testContext } from './support/make-change.js';
import { startReceiver, type Receiver } from './support/receiver.js';

type Verify = (
  secret: unknown,
  headers: Record<string, unknown>,
  rawBody: unknown,
  nowSeconds?: number,
) => boolean;

const DOC = resolve(dirname(fileURLToPath(import.meta.url)), '../../docs/webhook-signatures.md');
const PLAIN = 'hook-sécret-Ω-42';
const WHSEC = `whsec_${randomBytes(32).toString('base64')}`;

let verify: Verify;
let receiver: Receiver;
let dir: string;
beforeAll(async () => {
  const blocks = [...readFileSync(DOC, 'utf8').matchAll(/^```js verify-webhook\.mjs\n([\s\S]*?)^```$/gm)];
  expect(blocks, 'one `js verify-webhook.mjs` block in the doc').toHaveLength(1);
  dir = mkdtempSync(join(tmpdir(), 'feedsync-doc-verifier-'));
  const file = join(dir, 'verify-webhook.mjs');
  writeFileSync(file, blocks[0]![1]!);
  verify = ((await import(pathToFileURL(file).href)) as { verifyWebhook: Verify }).verifyWebhook;
  receiver = await startReceiver();
});
afterAll(async () => {
  await receiver.close();
  rmSync(dir, { recursive: true, force: true });
});

/** A request as the real sink sends it with `secret`. */
async function signed(secret: string): Promise<{ headers: IncomingHttpHeaders; body: Buffer; now: number }> {
  const filter = { sources: [], services: [], event_types: [], resource_types: [] };
  const sink = await openWebhookSink(
    { name: 'hook', type: 'webhook', url: receiver.url, secret, timeout_ms: 2000, filter },
    testContext('hook', '/'),
  );
  try {
    await sink.deliver(makeChange());
  } finally {
    await sink.close();
  }
  const { headers, body } = receiver.requests.at(-1)!;
  return { headers, body, now: Number(headers['webhook-timestamp']) };
}

describe.each([
  ['a plain secret', PLAIN],
  ['a whsec_ secret', WHSEC],
])('the documented verifier, %s', (_what, secret) => {
  it('accepts what the sink signed, within the tolerance either way', async () => {
    const { headers, body, now } = await signed(secret);
    expect(verify(secret, headers, body)).toBe(true);
    expect(verify(secret, headers, body, now + 300)).toBe(true);
    expect(verify(secret, headers, body, now - 300)).toBe(true);
  });

  it('refuses a wrong secret, a tampered body or id, a stale or future timestamp', async () => {
    const { headers, body, now } = await signed(secret);
    // One character changed inside (an appended one may be ignored by base64 decoding: same key).
    const wrong = `${secret.slice(0, 8)}${secret[8] === 'A' ? 'B' : 'A'}${secret.slice(9)}`;
    expect(verify(wrong, headers, body)).toBe(false);
    expect(verify(PLAIN === secret ? WHSEC : PLAIN, headers, body)).toBe(false);
    const tampered = Buffer.from(body);
    tampered[tampered.length - 2] ^= 1;
    expect(verify(secret, headers, tampered)).toBe(false);
    expect(verify(secret, { ...headers, 'webhook-id': 'scheduling:1' }, body)).toBe(false);
    expect(verify(secret, { ...headers, 'webhook-timestamp': String(now + 1) }, body, now)).toBe(false);
    expect(verify(secret, headers, body, now + 301)).toBe(false);
    expect(verify(secret, headers, body, now - 301)).toBe(false);
  });
});

describe('hostile headers: false, never a throw', () => {
  const hostile = (h: IncomingHttpHeaders): [string, Record<string, unknown>][] => {
    const sig = String(h['webhook-signature']);
    const sigLength = sig.length - 'v1,'.length;
    return [
      [
        'non-ASCII signature of the right length',
        { ...h, 'webhook-signature': `v1,${'é'.repeat(sigLength)}` },
      ],
      [
        'non-ASCII signature of the right byte length',
        { ...h, 'webhook-signature': `v1,${'é'.repeat(sigLength / 2)}` },
      ],
      ['signature missing', { ...h, 'webhook-signature': undefined }],
      ['id missing', { ...h, 'webhook-id': undefined }],
      ['timestamp missing', { ...h, 'webhook-timestamp': undefined }],
      ['headers repeated (arrays)', { ...h, 'webhook-signature': [sig, sig] }],
      ['a number for a header', { ...h, 'webhook-timestamp': 12 }],
      ['an empty signature', { ...h, 'webhook-signature': '' }],
      ['only the version', { ...h, 'webhook-signature': 'v1,' }],
      ['another version', { ...h, 'webhook-signature': sig.replace('v1,', 'v2,') }],
      ['garbage', { ...h, 'webhook-signature': '\u0000\uffff,,, v1 ,v1,,' }],
      ['a megabyte of spaces', { ...h, 'webhook-signature': ' '.repeat(1 << 20) }],
      ['a timestamp in exponent form', { ...h, 'webhook-timestamp': '1e10' }],
      ['a negative timestamp', { ...h, 'webhook-timestamp': '-1' }],
      ['a megabyte of digits as timestamp', { ...h, 'webhook-timestamp': '9'.repeat(1 << 20) }],
      ['a non-ASCII id', { ...h, 'webhook-id': 'é'.repeat(20) }],
    ];
  };

  it('for each malformed header, secret or body', async () => {
    const { headers, body } = await signed(PLAIN);
    const cases: [string, () => boolean][] = hostile(headers).map(([what, h]) => [
      what,
      () => verify(PLAIN, h, body),
    ]);
    cases.push(
      ['no headers at all', () => verify(PLAIN, {}, body)],
      ['the body as a string', () => verify(PLAIN, headers, body.toString('utf8'))],
      ['no body', () => verify(PLAIN, headers, undefined)],
      ['no secret', () => verify(undefined, headers, body)],
      ['an empty whsec_ secret', () => verify('whsec_', headers, body)],
      ['a secret that is not a string', () => verify(Buffer.from(PLAIN), headers, body)],
    );
    for (const [what, run] of cases) {
      let result: unknown;
      expect(() => (result = run()), what).not.toThrow();
      expect(result, what).toBe(false);
    }
  });

  it('the example it replaces threw on a non-ASCII signature of the right length', async () => {
    // The former README example, on the deprecated header: what the test above guards against.
    const former = (secret: string, header: string, rawBody: Buffer) => {
      const expected = 'sha256=' + createHmac('sha256', secret).update(rawBody).digest('hex');
      return header.length === expected.length && timingSafeEqual(Buffer.from(header), Buffer.from(expected));
    };
    const { headers, body } = await signed(PLAIN);
    const header = String(headers['x-feedsync-signature']);
    expect(former(PLAIN, header, body)).toBe(true);
    expect(() => former(PLAIN, `sha256=${'é'.repeat(64)}`, body)).toThrow(RangeError);
  });
});
