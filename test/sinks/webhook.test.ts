import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { WebhookSinkConfig } from '../../src/config/types.js';
import { ConfigError, NeverError, RetryLaterError } from '../../src/core/errors.js';
import type { Sink } from '../../src/sinks/sink.js';
import { openWebhookSink } from '../../src/sinks/webhook.js';
import { describeSinkConformance } from '../../src/testing/conformance.js';
import { makeChange, testContext } from './support/make-change.js';
import { signatureValid, startReceiver, type Receiver } from './support/receiver.js';

const SECRET = 's3cr3t-do-not-leak';
const filter = { sources: [], services: [], event_types: [], resource_types: [] };

function config(url: string, overrides: Partial<WebhookSinkConfig> = {}): WebhookSinkConfig {
  return { name: 'webhook', type: 'webhook', url, secret: SECRET, timeout_ms: 2000, filter, ...overrides };
}

async function failure(promise: Promise<unknown>): Promise<Error> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(err instanceof Error)) throw new Error('expected the delivery to fail');
  return err;
}

let receiver: Receiver;
beforeAll(async () => {
  receiver = await startReceiver(SECRET);
});
afterAll(async () => {
  await receiver.close();
});

describe('webhook sink', () => {
  describeSinkConformance('webhook', {
    open: () => openWebhookSink(config(receiver.url), testContext('webhook', '/')),
    delivered: async () => [...receiver.keys],
    breakRetry: async () => {
      receiver.mode = { kind: 'status', status: 503 };
    },
    breakNever: async () => {
      receiver.mode = { kind: 'status', status: 400 };
    },
    heal: async () => {
      receiver.mode = { kind: 'ok' };
    },
  });

  const open: Sink[] = [];
  afterEach(async () => {
    receiver.mode = { kind: 'ok' };
    await Promise.all(open.splice(0).map((s) => s.close()));
  });
  async function openSink(overrides: Partial<WebhookSinkConfig> = {}, url = receiver.url): Promise<Sink> {
    const sink = await openWebhookSink(config(url, overrides), testContext('webhook', '/'));
    open.push(sink);
    return sink;
  }
  const lastRequest = () => receiver.requests[receiver.requests.length - 1]!;

  it('POSTs the change as JSON with key, signature of the exact body and user agent', async () => {
    const sink = await openSink();
    const change = makeChange();
    await sink.deliver(change);
    const req = lastRequest();
    expect(req.method).toBe('POST');
    expect(req.url).toBe('/hooks/feedsync');
    expect(req.headers['content-type']).toBe('application/json');
    expect(req.headers['x-feedsync-key']).toBe(change.key);
    expect(req.headers['user-agent']).toMatch(/^feedsync\/\d+\.\d+\.\d+/);
    expect(signatureValid(SECRET, req.body, req.headers['x-feedsync-signature'])).toBe(true);
    expect(signatureValid('another secret', req.body, req.headers['x-feedsync-signature'])).toBe(false);
    expect(JSON.parse(req.body.toString('utf8'))).toEqual(change);
  });

  it('sends no signature header without a secret', async () => {
    const sink = await openSink({ secret: undefined });
    receiver.mode = { kind: 'status', status: 204 };
    await sink.deliver(makeChange());
    for (const name of ['x-feedsync-signature', 'webhook-id', 'webhook-timestamp', 'webhook-signature'])
      expect(lastRequest().headers[name], name).toBeUndefined();
  });

  it('reads Retry-After as seconds or as an HTTP date', async () => {
    const sink = await openSink();
    receiver.mode = { kind: 'status', status: 429, retryAfter: '7' };
    const seconds = await failure(sink.deliver(makeChange()));
    expect(seconds).toBeInstanceOf(RetryLaterError);
    expect((seconds as RetryLaterError).retryAfterMs).toBe(7000);

    receiver.mode = { kind: 'status', status: 503, retryAfter: new Date(Date.now() + 30_000).toUTCString() };
    const date = (await failure(sink.deliver(makeChange()))) as RetryLaterError;
    expect(date).toBeInstanceOf(RetryLaterError);
    expect(date.retryAfterMs).toBeGreaterThan(25_000);
    expect(date.retryAfterMs).toBeLessThanOrEqual(30_000);

    receiver.mode = { kind: 'status', status: 502 };
    const none = (await failure(sink.deliver(makeChange()))) as RetryLaterError;
    expect(none).toBeInstanceOf(RetryLaterError);
    expect(none.retryAfterMs).toBeUndefined();
  });

  it.each([408, 429, 500, 503])('treats HTTP %i as retry-later', async (status) => {
    const sink = await openSink();
    receiver.mode = { kind: 'status', status };
    const err = await failure(sink.deliver(makeChange()));
    expect(err).toBeInstanceOf(RetryLaterError);
    expect(err.message).toContain(`HTTP ${status}`);
  });

  it.each([400, 401, 404, 410, 422, 301])('treats HTTP %i as never', async (status) => {
    const sink = await openSink();
    receiver.mode = { kind: 'status', status, body: 'field "key" rejected' };
    const err = await failure(sink.deliver(makeChange()));
    expect(err).toBeInstanceOf(NeverError);
    expect(err.message).toContain('field "key" rejected');
  });

  it('gives up on a receiver that does not answer within timeout_ms, as retry-later', async () => {
    const sink = await openSink({ timeout_ms: 200 });
    receiver.mode = { kind: 'hang' };
    const started = Date.now();
    const err = await failure(sink.deliver(makeChange()));
    expect(err).toBeInstanceOf(RetryLaterError);
    expect(err.message).toContain('timed out after 200 ms');
    expect(Date.now() - started).toBeLessThan(2000);
  });

  it('treats a refused connection as retry-later', async () => {
    const port = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, '127.0.0.1', () => {
        const free = (probe.address() as AddressInfo).port;
        probe.close(() => resolve(free));
      });
    });
    const sink = await openSink({}, `http://127.0.0.1:${port}/hook`);
    const err = await failure(sink.deliver(makeChange()));
    expect(err).toBeInstanceOf(RetryLaterError);
    expect(err.message).toContain(`http://127.0.0.1:${port}/hook`);
  });

  it('names sink and URL in errors but never the secret, userinfo or query', async () => {
    const url = new URL(receiver.url);
    url.username = 'bob';
    url.password = 'hunter2';
    url.search = '?token=abc123';
    const sink = await openSink({}, url.toString());
    receiver.mode = { kind: 'status', status: 400, body: 'nope' };
    const err = await failure(sink.deliver(makeChange()));
    expect(err.message).toContain('sink "webhook"');
    expect(err.message).toContain(receiver.url);
    for (const secret of [SECRET, 'hunter2', 'abc123']) expect(err.message).not.toContain(secret);
  });

  it('drains responses so one keep-alive connection carries many deliveries', async () => {
    const sink = await openSink();
    const before = receiver.connections();
    for (let i = 0; i < 20; i++) {
      receiver.mode =
        i % 2 === 0 ? { kind: 'ok' } : { kind: 'status', status: 500, body: 'x'.repeat(100_000) };
      await sink.deliver(makeChange()).catch(() => undefined);
    }
    // An undrained body pins its connection, which would make every delivery open a new one; the
    // pool may open a second while the first is being released.
    expect(receiver.connections() - before).toBeLessThanOrEqual(2);
  });

  it('rejects a URL that is not http(s) when opened', async () => {
    await expect(openSink({}, 'ftp://127.0.0.1/x')).rejects.toBeInstanceOf(ConfigError);
  });
});
