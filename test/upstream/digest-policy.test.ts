// A source's Digest floor (sources[].digest_min, require_qop; issue #28 item 5), against a real
// Digest server on 127.0.0.1 whose verification (support/digest-server.ts) is written apart from
// src/upstream/digest.ts. A server, or anything on the path, chooses what it offers: below the
// floor nothing is answered, the refusal names the source, the offer and the key, and is counted.
import type { Logger } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { UpstreamAuthError } from '../../src/core/errors.js';
import { PipelineEvents } from '../../src/core/events.js';
import { createUpstreamClient } from '../../src/upstream/client.js';
import type { DigestPolicy } from '../../src/upstream/digest.js';
import { DigestServer, type DigestServerOptions } from './support/digest-server.js';

const USER = 'feedsync';
const PASSWORD = 'pw-policy-3c1e';
const PATH = '/api/events?newer_than=5';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function setup(serverOpts: Partial<DigestServerOptions>, digest?: DigestPolicy) {
  const server = await DigestServer.start({ username: USER, password: PASSWORD, ...serverOpts });
  server.route(PATH, {
    status: 200,
    headers: { 'content-type': 'application/json' },
    body: '{"entries":[]}',
  });
  const events = new PipelineEvents();
  const refused: { reason: string; url: string }[] = [];
  events.on('upstream:refused', (e) => refused.push({ reason: e.reason, url: e.url }));
  const warnings: { obj: unknown; msg: string }[] = [];
  const logger = { warn: (obj: unknown, msg: string) => warnings.push({ obj, msg }) } as unknown as Logger;
  const client = createUpstreamClient({
    source: 'sched',
    username: USER,
    password: PASSWORD,
    format: 'json',
    timeoutMs: 2000,
    retry: { attempts: 3, baseMs: 1, maxMs: 5 },
    events,
    logger,
    digest,
  });
  cleanups.push(
    () => server.close(),
    () => client.close(),
  );
  return { server, refused, warnings, get: () => client.get(server.url(PATH), { kind: 'feed' }) };
}

async function rejection(p: Promise<unknown>): Promise<UpstreamAuthError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(UpstreamAuthError);
  return err as UpstreamAuthError;
}

describe('a floor the server does not reach', () => {
  it.each([
    [
      'only MD5, the source demands SHA-256',
      { algorithm: 'MD5', qopOffer: 'auth' },
      { min: 'sha-256', requireQop: false },
      'MD5 with qop=auth',
      'digest_min: md5',
    ],
    [
      'only the no-qop form, the source demands qop',
      { algorithm: 'SHA-256', qop: false },
      { min: 'md5', requireQop: true },
      'SHA-256 without qop',
      'require_qop: false',
    ],
  ] as const)(
    '%s: refused before any Authorization, named, counted',
    async (_n, so, policy, offered, key) => {
      const { server, refused, get } = await setup(so, policy);
      const err = await rejection(get());
      const url = server.url(PATH);
      expect(err.message).toBe(
        `authentication failed on GET ${url}: source sched refuses the 401's challenges: ` +
          `the server offers only ${offered}, weaker than the source accepts ` +
          `(digest_min: ${policy.min}, require_qop: ${policy.requireQop}); ` +
          `only if nothing on the path can alter the challenge, set ${key} on the source`,
      );
      expect(err.retryable).toBe(false);
      expect(err.message).not.toContain('check the source');
      expect(refused).toEqual([{ reason: 'weak_digest', url }]);
      // One request: not retried at once (the poller paces it like any 401), nothing was signed.
      expect(server.requests).toHaveLength(1);
      expect(server.requests.filter((r) => r.authorization)).toEqual([]);
    },
  );
});

describe('a floor the server reaches', () => {
  it('takes SHA-256 among MD5 and SHA-256, in either order, and is verified', async () => {
    for (const algorithms of [
      ['MD5', 'SHA-256'],
      ['SHA-256', 'MD5'],
    ] as const) {
      const { server, refused, get } = await setup(
        { algorithms: [...algorithms], qopOffer: 'auth' },
        { min: 'sha-256', requireQop: true },
      );
      await expect(get()).resolves.toMatchObject({ status: 200 });
      await expect(get()).resolves.toMatchObject({ status: 200 });
      expect(server.requests.map((r) => r.outcome)).toEqual(['401', '200', '200']);
      for (const r of server.requests.slice(1))
        expect(r.authorization).toMatch(/algorithm=SHA-256\b.*qop=auth/);
      expect(refused).toEqual([]);
    }
  });

  it('by default answers the no-qop form (UPSTREAM-DIALECTS D3) and says so once per origin', async () => {
    const { server, warnings, get } = await setup({ algorithm: 'MD5', qop: false, nonceMaxUses: 2 });
    for (let i = 0; i < 5; i++) await expect(get()).resolves.toMatchObject({ status: 200 });
    // Nonces expire every 2 uses: several challenges, one warning.
    expect(server.count((r) => r.outcome === '401')).toBeGreaterThan(1);
    expect(warnings).toEqual([
      {
        obj: { source: 'sched', origin: new URL(server.url('/')).origin },
        msg:
          'the server offers Digest only without qop (RFC 2069: no client nonce, no nonce count); ' +
          'answered; set require_qop: true on the source to refuse this form',
      },
    ]);
  });
});
