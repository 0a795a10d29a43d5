// Webhook signatures in the Standard Webhooks form (issue #28 item 5, CONTRACT §2): the real webhook
// sink posts to a receiver on 127.0.0.1 that verifies with the specification's published library
// (`standardwebhooks` on npm), as a receiver would; a replayed request with an old timestamp and a
// tampered body are rejected by that same check.
import { createHmac, randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { validateConfig } from '../../src/config/load.js';
import { RetryLaterError } from '../../src/core/errors.js';
import type { Sink } from '../../src/sinks/sink.js';
import { openWebhookSink, signingKey, type WebhookSinkConfig } from '../../src/sinks/webhook.js';
import { configError, minimalRaw } from '../config/helpers.js';
import { makeChange, testContext } from './support/make-change.js';
import { signatureValid } from './support/receiver.js';

interface Received {
  headers: IncomingHttpHeaders;
  body: Buffer;
  /** undefined: verified; else the library's reason. */
  rejected?: string;
}

/** A receiver that does what docs/webhook-signatures.md tells receivers to do, with the library. */
class LibraryReceiver {
  readonly received: Received[] = [];
  /** Answer this status to the next requests that verify (then 200). */
  failNext: number[] = [];
  private server!: Server;
  url = '';

  constructor(private readonly webhook: Webhook) {}

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks);
        const entry: Received = { headers: req.headers, body };
        this.received.push(entry);
        try {
          this.webhook.verify(body.toString('utf8'), req.headers as Record<string, string>);
        } catch (err) {
          entry.rejected = (err as Error).message;
          res.writeHead(401).end();
          return;
        }
        res.writeHead(this.failNext.shift() ?? 200).end();
      });
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/hook`;
    return this;
  }

  /** Sends a captured request again, as an attacker who recorded it would. */
  async replay(r: Received, body = r.body): Promise<number> {
    const headers: Record<string, string> = {};
    for (const name of ['content-type', 'webhook-id', 'webhook-timestamp', 'webhook-signature'])
      headers[name] = String(r.headers[name]);
    return (await fetch(this.url, { method: 'POST', headers, body })).status;
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }
}

const filter = { sources: [], services: [], event_types: [], resource_types: [] };
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  vi.useRealTimers();
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function setup(
  secret: string,
  librarySecret: string,
): Promise<{ sink: Sink; receiver: LibraryReceiver }> {
  const receiver = await new LibraryReceiver(new Webhook(librarySecret)).start();
  const config: WebhookSinkConfig = {
    name: 'hook',
    type: 'webhook',
    url: receiver.url,
    secret,
    timeout_ms: 2000,
    filter,
  };
  const sink = await openWebhookSink(config, testContext('hook', '/'));
  cleanups.push(
    () => receiver.close(),
    () => sink.close(),
  );
  return { sink, receiver };
}

// A plain secret (non-ASCII on purpose: its UTF-8 bytes are the key) and a Standard Webhooks one.
const PLAIN = 'hook-sécret-Ω-42';
const WHSEC = `whsec_${randomBytes(24).toString('base64')}`;

describe('verified by the standardwebhooks library', () => {
  it.each([
    [
      'a plain secret, given to the library as whsec_ + base64 of its UTF-8 bytes',
      PLAIN,
      `whsec_${Buffer.from(PLAIN).toString('base64')}`,
    ],
    ['a whsec_ secret, given to the library as is', WHSEC, WHSEC],
  ])('%s', async (_what, secret, librarySecret) => {
    const { sink, receiver } = await setup(secret, librarySecret);
    const change = makeChange();
    const before = Math.floor(Date.now() / 1000);
    await sink.deliver(change);
    const [r] = receiver.received;
    expect(r!.rejected).toBeUndefined();
    expect(r!.headers['webhook-id']).toBe(change.key);
    expect(Number(r!.headers['webhook-timestamp'])).toBeGreaterThanOrEqual(before);
    expect(Number(r!.headers['webhook-timestamp'])).toBeLessThanOrEqual(Math.floor(Date.now() / 1000));
    expect(r!.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
    // The deprecated header is still sent, keyed with the same bytes.
    const key = secret.startsWith('whsec_')
      ? Buffer.from(secret.slice(6), 'base64')
      : Buffer.from(secret, 'utf8');
    expect(r!.headers['x-feedsync-signature']).toBe(
      `sha256=${createHmac('sha256', key).update(r!.body).digest('hex')}`,
    );
    if (secret === PLAIN)
      expect(signatureValid(PLAIN, r!.body, r!.headers['x-feedsync-signature'])).toBe(true);
  });

  it('a retry is signed again: same webhook-id, its own timestamp, verified each time', async () => {
    const { sink, receiver } = await setup(PLAIN, `whsec_${Buffer.from(PLAIN).toString('base64')}`);
    receiver.failNext = [503];
    const change = makeChange();
    await expect(sink.deliver(change)).rejects.toBeInstanceOf(RetryLaterError);
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 90_000 });
    await sink.deliver(change);
    const [first, second] = receiver.received;
    expect([first!.rejected, second!.rejected]).toEqual([undefined, undefined]);
    expect(second!.headers['webhook-id']).toBe(first!.headers['webhook-id']);
    expect(
      Number(second!.headers['webhook-timestamp']) - Number(first!.headers['webhook-timestamp']),
    ).toBeGreaterThanOrEqual(90);
  });

  it('rejects the captured request replayed after the tolerance (5 min), and a tampered body', async () => {
    const { sink, receiver } = await setup(WHSEC, WHSEC);
    await sink.deliver(makeChange());
    const captured = receiver.received[0]!;
    expect(captured.rejected).toBeUndefined();

    // Within the tolerance the signature still holds: receivers de-duplicate by webhook-id.
    expect(await receiver.replay(captured)).toBe(200);
    const tampered = Buffer.from(
      captured.body.toString('utf8').replace('"operation":"updated"', '"operation":"deleted"'),
    );
    expect(tampered.equals(captured.body)).toBe(false);
    expect(await receiver.replay(captured, tampered)).toBe(401);
    expect(receiver.received.at(-1)!.rejected).toBe('No matching signature found');

    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 6 * 60_000 });
    expect(await receiver.replay(captured)).toBe(401);
    expect(receiver.received.at(-1)!.rejected).toBe('Message timestamp too old');
  });
});

describe('the secret', () => {
  it('a whsec_ secret is a base64 key; anything else is its UTF-8 bytes', () => {
    expect(signingKey('whsec_AAEC')).toEqual(Buffer.from([0, 1, 2]));
    expect(signingKey('hunter2')).toEqual(Buffer.from('hunter2'));
    expect(signingKey(PLAIN)).toEqual(Buffer.from(PLAIN, 'utf8'));
  });

  it.each(['whsec_', 'whsec_not base64!', 'whsec_AAE'])(
    'refuses %j as a whsec_ secret, never echoing it',
    (secret) => {
      const raw = minimalRaw();
      raw.sinks.push({ name: 'hook', type: 'webhook', url: 'https://example.test/h', secret });
      const err = configError(() => validateConfig(raw, { dir: '/' }));
      expect(err.path).toBe('sinks[1].secret');
      expect(err.message).toContain('must continue with its key in canonical base64');
      if (secret.length > 'whsec_'.length) expect(err.message).not.toContain(secret);
    },
  );
});
