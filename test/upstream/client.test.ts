import { afterEach, describe, expect, it } from 'vitest';
import { createServer } from 'node:net';
import {
  DecodeError,
  UpstreamAuthError,
  UpstreamHttpError,
  UpstreamTransportError,
} from '../../src/core/errors.js';
import { PipelineEvents } from '../../src/core/events.js';
import {
  createUpstreamClient,
  type UpstreamClient,
  type UpstreamClientOptions,
} from '../../src/upstream/client.js';
import { DigestServer, type DigestServerOptions, type Reply } from './support/digest-server.js';

const USER = 'feedsync';
const PASSWORD = 'p@ss "w0rd" s3cret';
const JSON_TYPE = 'application/json; charset=utf-8';
const TITLE = JSON.stringify({
  resource_type: 'title',
  id: 42,
  name: 'Pilot',
  put_up: '2026-11-20T11:15:02+01:00',
  self_link: 'http://x/api/titles/42',
});
const OK: Reply = { status: 200, headers: { 'content-type': JSON_TYPE }, body: TITLE };

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function setup(
  serverOpts: Partial<DigestServerOptions> = {},
  clientOpts: Partial<UpstreamClientOptions> = {},
): Promise<{ server: DigestServer; client: UpstreamClient; codes: string[] }> {
  const server = await DigestServer.start({ username: USER, password: PASSWORD, ...serverOpts });
  const events = new PipelineEvents();
  const codes: string[] = [];
  events.on('http:response', (e) => codes.push(`${e.kind}:${e.code}`));
  const client = createUpstreamClient({
    source: 'scheduling',
    username: USER,
    password: PASSWORD,
    format: 'json',
    timeoutMs: 2000,
    retry: { attempts: 4, baseMs: 1, maxMs: 5 },
    events,
    ...clientOpts,
  });
  cleanups.push(
    () => server.close(),
    () => client.close(),
  );
  return { server, client, codes };
}

/** Everything an error could expose through logs: message, stack, own fields, cause chain. */
function exposed(err: unknown): string {
  const e = err as Error;
  return [e.message, e.stack, JSON.stringify(e), String((e as { cause?: unknown }).cause ?? '')].join('\n');
}

async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection');
}

describe('digest round trips', () => {
  it.each(['MD5', 'MD5-sess', 'SHA-256', 'SHA-256-sess'] as const)(
    '%s: N steady-state GETs cost N+1 requests',
    async (algorithm) => {
      const { server, client, codes } = await setup({ algorithm, opaque: 'op/aque' });
      server.route('/api/titles/42', OK);
      for (let i = 0; i < 5; i++) {
        const r = await client.get(server.url('/api/titles/42'), { kind: 'subject' });
        expect(r).toEqual({
          status: 200,
          url: server.url('/api/titles/42'),
          resource: {
            resource_type: 'title',
            id: 42,
            name: 'Pilot',
            put_up: '2026-11-20T10:15:02.000Z',
            self_link: 'http://x/api/titles/42',
          },
          bytes: Buffer.byteLength(TITLE),
        });
      }
      expect(server.count()).toBe(6);
      expect(client.stats()).toEqual({ requests: 6, unauthorized: 1 });
      expect(codes).toEqual(['subject:401', ...Array(5).fill('subject:200')]);
      expect(server.requests.every((r) => r.accept === 'application/json')).toBe(true);
    },
  );

  it('works in RFC 2069 mode (server offers no qop) and signs the query string', async () => {
    const { server, client } = await setup({ qop: false });
    server.route('/api/events?newer_than=5&expand=subject,source', OK);
    await client.get(server.url('/api/events?newer_than=5&expand=subject,source'), { kind: 'feed' });
    await client.get(server.url('/api/events?newer_than=5&expand=subject,source'), { kind: 'feed' });
    expect(server.count()).toBe(3);
  });

  it('serves 40 concurrent requests on one session, each with its own nonce count', async () => {
    const { server, client } = await setup({}, { connections: 8 });
    server.route('/api/titles/42', OK);
    await client.get(server.url('/api/titles/42'), { kind: 'subject' });
    const results = await Promise.all(
      Array.from({ length: 40 }, () => client.get(server.url('/api/titles/42'), { kind: 'subject' })),
    );
    expect(results.every((r) => r.status === 200)).toBe(true);
    // The server rejects a repeated nc, so 41 requests mean nobody shared one.
    expect(server.count()).toBe(42);
  });

  it.each([
    ['a fresh nonce per challenge', {}],
    ['the same nonce in every challenge', { staticNonce: 'same-nonce' }],
  ])('cold start with 30 concurrent requests (%s): all succeed, no nc reused', async (_name, serverOpts) => {
    const { server, client } = await setup(serverOpts, { connections: 8 });
    server.route('/api/titles/42', OK);
    const results = await Promise.all(
      Array.from({ length: 30 }, () => client.get(server.url('/api/titles/42'), { kind: 'subject' })),
    );
    expect(results.every((r) => r.status === 200)).toBe(true);
    const signed = server.requests.filter((r) => r.authorization);
    const pairs = signed.map((r) => /nonce="([^"]+)".*nc=(\w+)/.exec(r.authorization!)!.slice(1).join('/'));
    expect(new Set(pairs).size).toBe(pairs.length);
    expect(server.count((r) => r.outcome === '200')).toBe(30);
  });

  it('re-challenges once on a stale nonce, then is back to one round trip', async () => {
    const { server, client, codes } = await setup();
    server.route('/api/titles/42', OK);
    await client.get(server.url('/api/titles/42'), { kind: 'subject' });
    server.expireNonces();
    await client.get(server.url('/api/titles/42'), { kind: 'subject' });
    expect(server.count()).toBe(4);
    expect(server.requests[2]!.outcome).toBe('401');
    await client.get(server.url('/api/titles/42'), { kind: 'subject' });
    expect(server.count()).toBe(5);
    expect(codes.filter((c) => c.endsWith('401'))).toHaveLength(2);
  });

  it('follows Authentication-Info nextnonce without extra round trips', async () => {
    const { server, client } = await setup({ rotateNonce: true });
    server.route('/api/titles/42', OK);
    for (let i = 0; i < 4; i++) await client.get(server.url('/api/titles/42'), { kind: 'subject' });
    expect(server.count()).toBe(5);
    const nonces = server.requests.slice(1).map((r) => /nonce="([^"]+)"/.exec(r.authorization!)![1]);
    expect(new Set(nonces).size).toBe(4);
  });

  it('wrong password: UpstreamAuthError after one retry, not retried, no secret in it', async () => {
    const { server, client } = await setup({ password: 'the-right-one' });
    server.route('/api/events', OK);
    const err = await rejection(client.get(server.url('/api/events'), { kind: 'feed' }));
    expect(err).toBeInstanceOf(UpstreamAuthError);
    expect((err as Error).message).toContain(server.url('/api/events'));
    expect(server.count()).toBe(2);
    expect(exposed(err)).not.toContain(PASSWORD);
    expect(exposed(err)).not.toMatch(/Digest |response=/);
  });

  it('a 401 without a Digest challenge is an UpstreamAuthError, not retried', async () => {
    const { server, client } = await setup({ challengeHeader: 'Basic realm="proxy"' });
    const err = await rejection(client.get(server.url('/api/events'), { kind: 'feed' }));
    expect(err).toBeInstanceOf(UpstreamAuthError);
    expect((err as Error).message).toMatch(/no Digest challenge/);
    expect(server.count()).toBe(1);
  });
});

describe('retries', () => {
  const url = '/api/events';

  it.each([
    ['500', { status: 500, body: 'boom' }],
    ['503', { status: 503 }],
    ['429 without Retry-After', { status: 429 }],
    ['408', { status: 408 }],
    ['a reset connection', { action: 'reset' }],
    ['a truncated body', { action: 'truncate', body: TITLE, contentType: JSON_TYPE }],
    [
      'malformed JSON',
      { status: 200, headers: { 'content-type': JSON_TYPE }, body: '{"resource_type": "ti' },
    ],
    [
      'an HTML error page',
      { status: 200, headers: { 'content-type': 'text/html' }, body: '<html>oops</html>' },
    ],
  ] as [string, Reply][])('retries after %s, then succeeds', async (_name, failure) => {
    const { server, client } = await setup();
    server.route(url, failure, failure, OK);
    const r = await client.get(server.url(url), { kind: 'feed' });
    expect(r.status).toBe(200);
    expect(server.count((q) => q.outcome !== '401')).toBe(3);
  });

  it('honours Retry-After in seconds', async () => {
    const { server, client } = await setup();
    server.route(url, { status: 429, headers: { 'retry-after': '1' } }, OK);
    const t0 = Date.now();
    await client.get(server.url(url), { kind: 'feed' });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(950);
  });

  it('honours Retry-After as an HTTP date', async () => {
    const { server, client } = await setup();
    // HTTP dates have one-second resolution: 2 s ahead means a wait of more than 1 s.
    const at = new Date(Date.now() + 2000).toUTCString();
    server.route(url, { status: 503, headers: { 'retry-after': at } }, OK);
    const t0 = Date.now();
    await client.get(server.url(url), { kind: 'feed' });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(900);
  });

  it('caps Retry-After', async () => {
    const { server, client } = await setup(
      {},
      { retry: { attempts: 3, baseMs: 1, maxMs: 5, retryAfterCapMs: 50 } },
    );
    server.route(url, { status: 429, headers: { 'retry-after': '3600' } }, OK);
    const t0 = Date.now();
    await client.get(server.url(url), { kind: 'feed' });
    expect(Date.now() - t0).toBeLessThan(1000);
  });

  it('retries a timeout and reports it as such', async () => {
    const { server, client, codes } = await setup({}, { timeoutMs: 150 });
    server.route(
      url,
      { status: 200, headers: { 'content-type': JSON_TYPE }, body: TITLE, delayMs: 1000 },
      OK,
    );
    const r = await client.get(server.url(url), { kind: 'feed' });
    expect(r.status).toBe(200);
    expect(codes).toContain('feed:timeout');
  });

  it('exhausted 503s: UpstreamHttpError after `attempts` tries', async () => {
    const { server, client, codes } = await setup();
    server.route(url, { status: 503 });
    const err = await rejection(client.get(server.url(url), { kind: 'feed' }));
    expect(err).toBeInstanceOf(UpstreamHttpError);
    expect(err).toMatchObject({ status: 503, url: server.url(url), retryable: true });
    expect(server.count((q) => q.outcome === '503')).toBe(4);
    expect(codes.filter((c) => c === 'feed:503')).toHaveLength(4);
    expect(exposed(err)).not.toContain(PASSWORD);
  });

  it('exhausted timeouts: UpstreamTransportError(timeout)', async () => {
    const { server, client } = await setup(
      {},
      { timeoutMs: 100, retry: { attempts: 2, baseMs: 1, maxMs: 2 } },
    );
    server.route(url, { action: 'hang' });
    const err = await rejection(client.get(server.url(url), { kind: 'feed' }));
    expect(err).toBeInstanceOf(UpstreamTransportError);
    expect(err).toMatchObject({ code: 'timeout' });
    expect(exposed(err)).not.toContain(PASSWORD);
  });

  it('exhausted bad bodies: DecodeError', async () => {
    const { server, client } = await setup();
    server.route(url, { status: 200, headers: { 'content-type': 'application/xml' }, body: '<events/>' });
    const err = await rejection(client.get(server.url(url), { kind: 'feed' }));
    expect(err).toBeInstanceOf(DecodeError);
    expect((err as Error).message).toMatch(/application\/xml does not match the requested json/);
  });

  it('connection refused: UpstreamTransportError(network) naming the URL, without secrets', async () => {
    const port = await freePort();
    const events = new PipelineEvents();
    const codes: string[] = [];
    events.on('http:response', (e) => codes.push(e.code));
    const client = createUpstreamClient({
      source: 'workflow',
      username: USER,
      password: PASSWORD,
      format: 'xml',
      timeoutMs: 1000,
      retry: { attempts: 2, baseMs: 1, maxMs: 2 },
      events,
    });
    cleanups.push(() => client.close());
    const err = await rejection(client.get(`http://127.0.0.1:${port}/workflow/api/events`, { kind: 'feed' }));
    expect(err).toBeInstanceOf(UpstreamTransportError);
    expect(err).toMatchObject({ code: 'network' });
    expect((err as Error).message).toContain(`http://127.0.0.1:${port}/workflow/api/events`);
    expect((err as Error).message).toMatch(/ECONNREFUSED/);
    expect(codes).toEqual(['network', 'network']);
    expect(exposed(err)).not.toContain(PASSWORD);
  });

  it('404 is a value, not retried', async () => {
    const { server, client } = await setup();
    server.route('/api/titles/1', { status: 404, body: 'gone' });
    const r = await client.get(server.url('/api/titles/1'), { kind: 'subject' });
    expect(r).toEqual({ status: 404, url: server.url('/api/titles/1') });
    expect(server.count()).toBe(2);
  });

  it('400 is an UpstreamHttpError, not retried', async () => {
    const { server, client } = await setup();
    server.route(url, { status: 400, body: 'bad request' });
    const err = await rejection(client.get(server.url(url), { kind: 'feed' }));
    expect(err).toBeInstanceOf(UpstreamHttpError);
    expect(err).toMatchObject({ status: 400, retryable: false });
    expect(server.count()).toBe(2);
  });

  it('an abort stops the backoff wait promptly', async () => {
    const { server, client } = await setup({}, { retry: { attempts: 5, baseMs: 60_000, maxMs: 60_000 } });
    server.route(url, { status: 503, headers: { 'retry-after': '60' } });
    const ac = new AbortController();
    const p = rejection(client.get(server.url(url), { kind: 'feed', signal: ac.signal }));
    await new Promise((r) => setTimeout(r, 200));
    const t0 = Date.now();
    ac.abort();
    const err = await p;
    expect((err as Error).name).toBe('AbortError');
    expect(Date.now() - t0).toBeLessThan(500);
  });

  it('an abort interrupts a request in flight', async () => {
    const { server, client } = await setup({}, { timeoutMs: 10_000 });
    server.route(url, { action: 'hang' });
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 100);
    const t0 = Date.now();
    const err = await rejection(client.get(server.url(url), { kind: 'feed', signal: ac.signal }));
    expect((err as Error).name).toBe('AbortError');
    expect(Date.now() - t0).toBeLessThan(2000);
  });

  it('strips userinfo from URLs in results and errors', async () => {
    const { server, client } = await setup();
    const withUserinfo = server.url('/api/titles/9').replace('http://', 'http://someone:hunter2@');
    const r = await client.get(withUserinfo, { kind: 'subject' });
    expect(r).toEqual({ status: 404, url: server.url('/api/titles/9') });
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}
