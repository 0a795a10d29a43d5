// Digest forms a spec-following server may use (D1–D6), each against a real HTTP server on
// 127.0.0.1 whose verification (support/digest-server.ts) is written apart from src/upstream/digest.ts.
import { afterEach, describe, expect, it } from 'vitest';
import { UpstreamAuthError } from '../../src/core/errors.js';
import { PipelineEvents } from '../../src/core/events.js';
import { createUpstreamClient, type UpstreamClient } from '../../src/upstream/client.js';
import { DigestServer, type DigestServerOptions, type ServerAlgorithm } from './support/digest-server.js';

const USER = 'feedsync';
const PASSWORD = 'correct horse, "battery"';
const PATH = '/api/events?newer_than=5&expand=subject,source';
const OK = {
  status: 200,
  headers: { 'content-type': 'application/json' },
  body: '{"entries":[]}',
};

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function setup(
  serverOpts: Partial<DigestServerOptions> = {},
): Promise<{ server: DigestServer; client: UpstreamClient; codes: string[]; get: () => Promise<unknown> }> {
  const server = await DigestServer.start({ username: USER, password: PASSWORD, ...serverOpts });
  server.route(PATH, OK);
  const events = new PipelineEvents();
  const codes: string[] = [];
  events.on('http:response', (e) => codes.push(e.code));
  const client = createUpstreamClient({
    source: 'src',
    username: USER,
    password: PASSWORD,
    format: 'json',
    timeoutMs: 2000,
    retry: { attempts: 3, baseMs: 1, maxMs: 5 },
    events,
  });
  cleanups.push(
    () => server.close(),
    () => client.close(),
  );
  return { server, client, codes, get: () => client.get(server.url(PATH), { kind: 'feed' }) };
}

/** The algorithm param of the Authorization header of each signed request. */
function algorithmsUsed(server: DigestServer): (string | undefined)[] {
  return server.requests
    .filter((r) => r.authorization)
    .map((r) => /algorithm=("?)([\w-]+)\1/.exec(r.authorization!)?.[2]);
}

describe('D1 × D3: every algorithm with every qop form', () => {
  const algorithms: [string, Partial<DigestServerOptions>][] = [
    ['algorithm absent (MD5)', { omitAlgorithm: true }],
    ...(['MD5', 'MD5-sess', 'SHA-256', 'SHA-256-sess'] as ServerAlgorithm[]).map(
      (algorithm): [string, Partial<DigestServerOptions>] => [algorithm, { algorithm }],
    ),
  ];
  const qops: [string, Partial<DigestServerOptions>][] = [
    ['qop="auth"', { qopOffer: 'auth' }],
    ['qop="auth,auth-int"', { qopOffer: 'auth,auth-int' }],
    ['qop="auth-int, auth"', { qopOffer: 'auth-int, auth' }],
    ['no qop (RFC 2069)', { qop: false }],
  ];
  // The -sess variants hash a cnonce, which RFC 2617 forbids sending without qop (and RFC 7616
  // makes qop mandatory): no server can verify them in RFC 2069 mode, so that pair is not a form.
  const matrix = algorithms
    .flatMap(([a, ao]) => qops.map(([q, qo]) => [a, q, { ...ao, ...qo }] as const))
    .filter(([a, , o]) => !(a.endsWith('-sess') && o.qop === false));

  it.each(matrix)('%s, %s: 5 GETs cost 6 requests', async (_a, _q, opts) => {
    const { server, client, get } = await setup({ ...opts, opaque: 'opaque/value==' });
    for (let i = 0; i < 5; i++) await expect(get()).resolves.toMatchObject({ status: 200 });
    expect(client.stats()).toEqual({ requests: 6, unauthorized: 1 });
    expect(server.count((r) => r.outcome === '200')).toBe(5);
    if (opts.omitAlgorithm) expect(algorithmsUsed(server)).toEqual(Array(5).fill(undefined));
    if (opts.qop === false) expect(server.requests[1]!.authorization).not.toMatch(/\b(nc|cnonce|qop)=/);
  });

  it('qop="auth-int" only is a clear, non-retried auth error', async () => {
    const { server, get } = await setup({ qopOffer: 'auth-int' });
    const err = await get().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UpstreamAuthError);
    expect((err as Error).message).toMatch(/unsupported qop: auth-int/);
    expect(server.count()).toBe(1);
  });
});

describe('D2: several challenges in one 401', () => {
  it.each([
    ['two headers, MD5 first', { algorithms: ['MD5', 'SHA-256'], challengeLayout: 'headers' }, 'SHA-256'],
    ['two headers, SHA-256 first', { algorithms: ['SHA-256', 'MD5'], challengeLayout: 'headers' }, 'SHA-256'],
    ['one header listing both', { algorithms: ['MD5', 'SHA-256'], challengeLayout: 'one-header' }, 'SHA-256'],
    [
      'one header, sess variants',
      { algorithms: ['MD5-sess', 'SHA-256-sess'], challengeLayout: 'one-header' },
      'SHA-256-sess',
    ],
    [
      'Basic and an unsupported algorithm beside MD5, one header',
      {
        algorithms: ['MD5'],
        challengeLayout: 'one-header',
        extraChallenges: [
          'Basic realm="legacy"',
          'Digest realm="feedsync-test@127.0.0.1", qop="auth", algorithm=SHA-512-256, nonce="x", userhash=true',
        ],
      },
      'MD5',
    ],
    [
      'Negotiate token68 and Basic in their own headers beside SHA-256',
      {
        algorithms: ['SHA-256'],
        challengeLayout: 'headers',
        extraChallenges: ['Negotiate', 'Basic realm="a, b"'],
      },
      'SHA-256',
    ],
  ] as [string, Partial<DigestServerOptions>, string][])('%s → %s', async (_name, opts, chosen) => {
    const { server, client, get } = await setup(opts);
    for (let i = 0; i < 3; i++) await expect(get()).resolves.toMatchObject({ status: 200 });
    expect(algorithmsUsed(server)).toEqual([chosen, chosen, chosen]);
    expect(client.stats().unauthorized).toBe(1);
    const challenge = server.requests[0]!.challenge!;
    const offered = (opts.extraChallenges?.length ?? 0) + (opts.algorithms?.length ?? 1);
    if (opts.challengeLayout === 'headers') expect(challenge).toHaveLength(offered);
    else expect(typeof challenge).toBe('string');
  });
});

describe('D4: opaque, domain, stale, nextnonce', () => {
  it('opaque echoed (the server refuses without it) and domain ignored', async () => {
    const { server, get } = await setup({ opaque: 'o p,a"q', domain: '/api/ http://other/' });
    await get();
    await get();
    expect(server.requests.slice(1).every((r) => r.outcome === '200')).toBe(true);
  });

  it('stale=true: the new nonce is used, no auth failure, one extra request', async () => {
    const { server, client, codes, get } = await setup({ algorithm: 'MD5' });
    await get();
    server.expireNonces();
    await expect(get()).resolves.toMatchObject({ status: 200 });
    expect(server.requests.map((r) => r.outcome)).toEqual(['401', '200', '401', '200']);
    expect(server.requests[2]!.challenge).toMatch(/stale=true/);
    expect(codes).toEqual(['401', '200', '401', '200']);
    expect(client.stats()).toEqual({ requests: 4, unauthorized: 2 });
  });

  it('Authentication-Info nextnonce is followed with no 401 at all', async () => {
    const { server, client, get } = await setup({ rotateNonce: true, nonceMaxUses: 1 });
    for (let i = 0; i < 5; i++) await get();
    expect(client.stats()).toEqual({ requests: 6, unauthorized: 1 });
    const nonces = server.requests.slice(1).map((r) => /nonce="([^"]+)"/.exec(r.authorization!)![1]);
    expect(new Set(nonces).size).toBe(5);
  });
});

describe('D5: nonce expiry costs one 401 per expiry', () => {
  it('by use count (3 uses per nonce): 10 GETs, 4 challenges', async () => {
    const { client, get } = await setup({ nonceMaxUses: 3 });
    for (let i = 0; i < 10; i++) await expect(get()).resolves.toMatchObject({ status: 200 });
    // GET 1 is challenged cold; GETs 4, 7 and 10 each meet an exhausted nonce.
    expect(client.stats()).toEqual({ requests: 14, unauthorized: 4 });
  });

  it('by age: GETs within the lifetime cost nothing, the first after it one 401', async () => {
    const { server, client, get } = await setup({ nonceTtlMs: 400 });
    await get();
    await get();
    await new Promise((r) => setTimeout(r, 500));
    await get();
    await get();
    expect(client.stats()).toEqual({ requests: 6, unauthorized: 2 });
    expect(server.requests.map((r) => r.outcome)).toEqual(['401', '200', '200', '401', '200', '200']);
  });

  it('never: 20 GETs, one 401', async () => {
    const { client, get } = await setup({ algorithm: 'SHA-256' });
    for (let i = 0; i < 20; i++) await get();
    expect(client.stats()).toEqual({ requests: 21, unauthorized: 1 });
  });

  it('by use count under concurrency: at most one 401 per request in flight when it expires', async () => {
    const { server, client } = await setup({ nonceMaxUses: 10 });
    const get = () => client.get(server.url(PATH), { kind: 'feed' });
    await get();
    for (let round = 0; round < 3; round++) {
      const results = await Promise.all(Array.from({ length: 8 }, get));
      expect(results.every((r) => r.status === 200)).toBe(true);
    }
    // 25 successes over nonces of 10 uses: 3 expiries; each may catch up to 8 requests in flight.
    expect(server.count((r) => r.outcome === '200')).toBe(25);
    expect(client.stats().unauthorized).toBeLessThanOrEqual(1 + 3 * 8);
  });
});

describe('D6: wrong credentials', () => {
  it.each([
    ['MD5, qop auth', { algorithm: 'MD5', qopOffer: 'auth' }],
    ['SHA-256, no qop', { algorithm: 'SHA-256', qop: false }],
    ['algorithm absent', { omitAlgorithm: true }],
  ] as [string, Partial<DigestServerOptions>][])(
    '%s: one fresh try, then a non-retryable UpstreamAuthError without the password',
    async (_name, opts) => {
      const { server, get } = await setup({ ...opts, password: 'not the configured one' });
      const err = await get().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(UpstreamAuthError);
      expect((err as UpstreamAuthError).retryable).toBe(false);
      expect((err as Error).message).toMatch(/credentials rejected/);
      expect(JSON.stringify(err) + String((err as Error).stack)).not.toContain(PASSWORD);
      // The cold challenge, then exactly one signed try.
      expect(server.requests.map((r) => Boolean(r.authorization))).toEqual([false, true]);
    },
  );
});
