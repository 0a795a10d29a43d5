import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  authorizationHeader,
  DigestTestClient,
  parseChallenge,
  type Challenge,
} from './digest-test-client.js';
import { harness, type Harness } from './helpers.js';

async function challengeFor(url: string): Promise<Challenge> {
  const res = await fetch(url);
  expect(res.status).toBe(401);
  await res.arrayBuffer();
  return parseChallenge(res.headers.get('www-authenticate'));
}

function withAuth(url: string, header: string): Promise<Response> {
  return fetch(url, { headers: { authorization: header, accept: 'application/json' } });
}

describe('sandbox digest authentication', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await harness({ backlog: 20, nonceTtlMs: 300, password: 'p@ss "word"' });
  });
  afterAll(() => h.sb.close());

  it('answers an unauthenticated request with a challenge per service', async () => {
    const res = await fetch(`${h.base.scheduling}/api`);
    expect(res.status).toBe(401);
    const header = res.headers.get('www-authenticate')!;
    expect(header).toMatch(
      /^Digest realm="feedsync-sandbox-scheduling", qop="auth", algorithm=MD5, nonce="[^"]+", opaque="[^"]+"$/,
    );
    // MD5 on both by default: what curl --digest and Python requests speak (issue 11).
    const wf = await challengeFor(`${h.base.workflow}/api/events`);
    expect(wf).toMatchObject({
      realm: 'feedsync-sandbox-workflow',
      algorithm: 'MD5',
      qop: 'auth',
      stale: false,
    });
  });

  it('accepts a correct digest on both services, reusing the nonce with increasing nc', async () => {
    const client = new DigestTestClient(h.sb.username, h.sb.password);
    for (const service of ['scheduling', 'workflow'] as const) {
      for (let i = 0; i < 3; i++)
        expect((await client.get(`${h.base[service]}/api/events`)).status).toBe(200);
    }
    // One challenge per service, then every request went through on the first try.
    expect(client.unauthorized).toBe(2);
  });

  it('rejects a wrong password with a fresh, non-stale challenge, and counts the 401s', async () => {
    h.sb.resetStats();
    const bad = new DigestTestClient(h.sb.username, 'wrong');
    const res = await bad.get(`${h.base.scheduling}/api/events`);
    expect(res.status).toBe(401);
    const ch = parseChallenge(res.headers.get('www-authenticate'));
    expect(ch.stale).toBe(false);
    expect(ch.nonce).not.toBe(bad.challenge!.nonce);
    const stats = h.sb.stats().scheduling;
    expect(stats.unauthorized).toBe(2);
    expect(stats.statuses['401']).toBe(2);
    expect(stats.requests.feed).toBe(0);
  });

  it('says stale=true for a correct digest on an expired nonce', async () => {
    const url = `${h.base.scheduling}/api`;
    const ch = await challengeFor(url);
    const auth = (nc: number) =>
      authorizationHeader(ch, {
        username: h.sb.username,
        password: h.sb.password,
        method: 'GET',
        uri: '/scheduling/api',
        nc,
      });
    expect((await withAuth(url, auth(1))).status).toBe(200);
    await new Promise((r) => setTimeout(r, 450));
    const res = await withAuth(url, auth(2));
    expect(res.status).toBe(401);
    const again = parseChallenge(res.headers.get('www-authenticate'));
    expect(again.stale).toBe(true);
    expect(again.nonce).not.toBe(ch.nonce);
  });

  it('rejects a replayed nc (not stale), accepts out-of-order ones, and rejects a digest for another uri', async () => {
    const url = `${h.base.workflow}/api/events?newer_than=0`;
    const ch = await challengeFor(url);
    const input = {
      username: h.sb.username,
      password: h.sb.password,
      method: 'GET',
      uri: '/workflow/api/events?newer_than=0',
    };
    expect((await withAuth(url, authorizationHeader(ch, { ...input, nc: 5 }))).status).toBe(200);
    // concurrent requests on one nonce arrive in any order: a lower, unused nc is fine once
    expect((await withAuth(url, authorizationHeader(ch, { ...input, nc: 4 }))).status).toBe(200);
    for (const nc of [5, 4]) {
      const replay = await withAuth(url, authorizationHeader(ch, { ...input, nc }));
      expect(replay.status).toBe(401);
      expect(parseChallenge(replay.headers.get('www-authenticate')).stale).toBe(false);
    }
    expect((await withAuth(url, authorizationHeader(ch, { ...input, nc: 6 }))).status).toBe(200);
    const otherUri = authorizationHeader(ch, { ...input, uri: '/workflow/api', nc: 7 });
    expect((await withAuth(url, otherUri)).status).toBe(401);
    const wrongOpaque = authorizationHeader({ ...ch, opaque: 'x' }, { ...input, nc: 8 });
    expect((await withAuth(url, wrongOpaque)).status).toBe(401);
    const wrongAlgo = authorizationHeader({ ...ch, algorithm: 'SHA-256' }, { ...input, nc: 9 });
    expect((await withAuth(url, wrongAlgo)).status).toBe(401);
    expect((await withAuth(url, 'Basic c2FuZGJveDpzYW5kYm94LXNlY3JldA==')).status).toBe(401);
  });

  it('supports MD5-sess when configured', async () => {
    const sess = await harness({ backlog: 5, digestAlgorithms: { workflow: 'MD5-sess' } });
    try {
      const ch = await challengeFor(`${sess.base.workflow}/api`);
      expect(ch.algorithm).toBe('MD5-sess');
      expect((await sess.client.get(`${sess.base.workflow}/api`)).status).toBe(200);
    } finally {
      await sess.sb.close();
    }
  });

  it('never leaks the password in challenges or bodies', async () => {
    const res = await new DigestTestClient(h.sb.username, 'nope').get(`${h.base.scheduling}/api/events`);
    const text = (await res.text()) + JSON.stringify([...res.headers]);
    expect(text).not.toContain(h.sb.password);
  });
});
