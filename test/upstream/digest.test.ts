import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  ANY_DIGEST,
  DigestChallengeError,
  DigestSession,
  DigestTooWeakError,
  buildAuthorization,
  parseAuthenticateHeader,
  parseDigestChallenge,
} from '../../src/upstream/digest.js';

// RFC 7616 §3.9.1: GET /dir/index.html, user Mufasa, password "Circle of Life".
const RFC_PARAMS =
  'realm="http-auth@example.org", qop="auth, auth-int", nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", ' +
  'opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS"';
const RFC_CNONCE = 'f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ';
const MUFASA = { username: 'Mufasa', password: 'Circle of Life' };

function params(header: string): Record<string, string> {
  const [c] = parseAuthenticateHeader(header);
  return c!.params;
}

describe('RFC 7616 §3.9.1 example', () => {
  it('SHA-256 gives the published response', () => {
    const session = new DigestSession(MUFASA, ANY_DIGEST, () => RFC_CNONCE);
    session.onChallenge(`Digest ${RFC_PARAMS}, algorithm=SHA-256`);
    const auth = session.authorize('GET', '/dir/index.html')!;
    const p = params(auth.header);
    expect(p.response).toBe('753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1');
    expect(p).toMatchObject({
      username: 'Mufasa',
      realm: 'http-auth@example.org',
      uri: '/dir/index.html',
      algorithm: 'SHA-256',
      nc: '00000001',
      cnonce: RFC_CNONCE,
      qop: 'auth',
      opaque: 'FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS',
    });
  });

  it('MD5 gives the published response', () => {
    const session = new DigestSession(MUFASA, ANY_DIGEST, () => RFC_CNONCE);
    session.onChallenge(`Digest ${RFC_PARAMS}, algorithm=MD5`);
    const p = params(session.authorize('GET', '/dir/index.html')!.header);
    expect(p.response).toBe('8ca523f5e9506fed4657c9700eebdbec');
    expect(p.algorithm).toBe('MD5');
  });

  it('prefers SHA-256 when the server offers both challenges (RFC 7616 §3.9.1 sends two)', () => {
    const c = parseDigestChallenge([
      `Digest ${RFC_PARAMS}, algorithm=MD5`,
      `Digest ${RFC_PARAMS}, algorithm=SHA-256`,
    ]);
    expect(c.hash).toBe('SHA-256');
  });
});

describe('RFC 2617 §3.5 example', () => {
  it('MD5 with qop=auth, algorithm absent, gives the published response', () => {
    const session = new DigestSession(
      { username: 'Mufasa', password: 'Circle Of Life' },
      ANY_DIGEST,
      () => '0a4f113b',
    );
    session.onChallenge(
      'Digest realm="testrealm@host.com", qop="auth,auth-int", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", ' +
        'opaque="5ccc069c403ebaf9f0171e9517f40e41"',
    );
    const p = params(session.authorize('GET', '/dir/index.html')!.header);
    expect(p).toMatchObject({
      username: 'Mufasa',
      realm: 'testrealm@host.com',
      nonce: 'dcd98b7102dd2f0e8b11d0f600bfb0c093',
      uri: '/dir/index.html',
      qop: 'auth',
      nc: '00000001',
      cnonce: '0a4f113b',
      response: '6629fae49393a05397450978507c4ef1',
      opaque: '5ccc069c403ebaf9f0171e9517f40e41',
    });
    // The server sent no algorithm: none is echoed (RFC 2617 clients expect none).
    expect(p.algorithm).toBeUndefined();
  });

  it('RFC 2069 mode: response = H(HA1:nonce:HA2), from the same example inputs', () => {
    const md5 = (s: string) => createHash('md5').update(s).digest('hex');
    const ha1 = md5('Mufasa:testrealm@host.com:Circle Of Life');
    const ha2 = md5('GET:/dir/index.html');
    const c = parseDigestChallenge(
      'Digest realm="testrealm@host.com", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093"',
    );
    const p = params(
      buildAuthorization(
        c,
        { username: 'Mufasa', password: 'Circle Of Life' },
        'GET',
        '/dir/index.html',
        1,
        'x',
      ),
    );
    expect(p.response).toBe(md5(`${ha1}:dcd98b7102dd2f0e8b11d0f600bfb0c093:${ha2}`));
  });
});

describe('parseDigestChallenge', () => {
  it('picks Digest among several schemes in one header, with commas inside quoted values', () => {
    const c = parseDigestChallenge(
      'Basic realm="a, b", Negotiate abc==, Digest realm="r, \\"q\\"", nonce=abc123, qop="auth-int, auth", stale=TRUE',
    );
    expect(c).toMatchObject({ realm: 'r, "q"', nonce: 'abc123', qop: 'auth', stale: true, hash: 'MD5' });
    expect(c.algorithm).toBeUndefined();
  });

  it('skips a stronger challenge it cannot answer (auth-int only) for a weaker one it can', () => {
    const c = parseDigestChallenge(
      'Digest realm="r", nonce="a", qop="auth-int", algorithm=SHA-256, Digest realm="r", nonce="b", qop="auth", algorithm=MD5',
    );
    expect(c).toMatchObject({ hash: 'MD5', nonce: 'b', qop: 'auth' });
  });

  it('accepts lowercase scheme and algorithm names and MD5-sess / SHA-256-sess', () => {
    expect(parseDigestChallenge('digest realm="x", nonce="n", algorithm=md5-sess').hash).toBe('MD5-sess');
    expect(parseDigestChallenge('Digest realm="x", nonce="n", algorithm=SHA-256-sess').hash).toBe(
      'SHA-256-sess',
    );
  });

  it('without qop uses RFC 2069 mode (no nc/cnonce in the answer)', () => {
    const c = parseDigestChallenge('Digest realm="x", nonce="n"');
    expect(c.qop).toBeUndefined();
    const p = params(buildAuthorization(c, MUFASA, 'GET', '/a?b=1', 1, 'cn'));
    expect(p.nc).toBeUndefined();
    expect(p.cnonce).toBeUndefined();
    expect(p.uri).toBe('/a?b=1');
    expect(p.response).toMatch(/^[0-9a-f]{32}$/);
  });

  it.each([
    [undefined, /without a WWW-Authenticate/],
    ['Basic realm="x"', /no Digest challenge/],
    ['Digest realm="x", nonce="n", algorithm=SHA-512-256', /unsupported digest algorithm/],
    ['Digest realm="x", nonce="n", qop="auth-int"', /unsupported qop/],
    ['Digest nonce="n"', /without realm/],
    ['Digest realm="x"', /without nonce/],
  ])('rejects %s', (header, message) => {
    expect(() => parseDigestChallenge(header)).toThrow(DigestChallengeError);
    expect(() => parseDigestChallenge(header)).toThrow(message);
  });
});

describe('parseDigestChallenge with a source policy (digest_min, require_qop)', () => {
  const STRICT = { min: 'sha-256', requireQop: true } as const;
  const md5 = 'Digest realm="r", nonce="m", qop="auth", algorithm=MD5';
  const md5NoQop = 'Digest realm="r", nonce="l"';
  const sha = 'Digest realm="r", nonce="s", qop="auth", algorithm=SHA-256';
  const shaNoQop = 'Digest realm="r", nonce="t", algorithm=SHA-256';

  it('takes the strongest allowed challenge whatever the server order', () => {
    // MD5 listed first (a server's, or a path's, preference) still loses to SHA-256.
    expect(parseDigestChallenge([md5, sha]).nonce).toBe('s');
    expect(parseDigestChallenge([md5NoQop, md5]).nonce).toBe('m');
    // Algorithm outranks qop; among equals the server's order decides.
    expect(parseDigestChallenge([md5, shaNoQop]).nonce).toBe('t');
    expect(
      parseDigestChallenge([sha, `Digest realm="r", nonce="s2", qop="auth", algorithm=SHA-256-sess`]).nonce,
    ).toBe('s');
    expect(parseDigestChallenge([md5, shaNoQop], { min: 'md5', requireQop: true }).nonce).toBe('m');
  });

  it.each([
    ['only MD5', [md5], { min: 'sha-256', requireQop: false }, 'MD5 with qop=auth', 'digest_min: md5'],
    [
      'only MD5-sess',
      ['Digest realm="r", nonce="x", qop="auth", algorithm=MD5-sess'],
      STRICT,
      'MD5-sess with qop=auth',
      'digest_min: md5',
    ],
    ['only no-qop', [md5NoQop], { min: 'md5', requireQop: true }, 'MD5 without qop', 'require_qop: false'],
    ['SHA-256 without qop', [shaNoQop], STRICT, 'SHA-256 without qop', 'require_qop: false'],
    [
      'MD5 and no-qop SHA-256',
      [md5, shaNoQop],
      STRICT,
      'MD5 with qop=auth, SHA-256 without qop',
      'digest_min: md5 or require_qop: false',
    ],
  ] as const)(
    'refuses %s when the source demands more, naming offer and key',
    (_n, headers, policy, offered, keys) => {
      let caught: unknown;
      try {
        parseDigestChallenge([...headers], policy);
      } catch (err) {
        caught = err;
      }
      expect(caught).toBeInstanceOf(DigestTooWeakError);
      expect(caught).toBeInstanceOf(DigestChallengeError);
      const message = (caught as Error).message;
      expect(message).toContain(`the server offers only ${offered}, weaker than the source accepts`);
      expect(message).toContain(`set ${keys} on the source`);
    },
  );

  it('the default policy answers every form the dialects list (D1, D3)', () => {
    expect(ANY_DIGEST).toEqual({ min: 'md5', requireQop: false });
    expect(parseDigestChallenge(md5NoQop).qop).toBeUndefined();
    expect(parseDigestChallenge(md5).hash).toBe('MD5');
  });

  it('describes at most a few offers, each cut short (a hostile 401 is bounded in the message)', () => {
    // Within the 16 KiB a challenge may take (a longer one is refused by its size alone).
    const many = Array.from({ length: 300 }, (_, i) => `Digest realm="r", nonce="${i}", qop="auth"`);
    expect(() => parseDigestChallenge(many, STRICT)).toThrow(/, 296 more, weaker than/);
    const long = `Digest realm="r", nonce="n", algorithm=${'X'.repeat(2_500)}`;
    let message = '';
    try {
      parseDigestChallenge([long, long, long, long, long, long]);
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toMatch(/^unsupported digest algorithm\(s\): X{40}…, /);
    expect(message.length).toBeLessThan(300);
  });

  it('a session with a policy refuses a later downgrade, keeping nothing from it', () => {
    const session = new DigestSession(MUFASA, STRICT);
    session.onChallenge(sha);
    expect(() => session.onChallenge(md5)).toThrow(DigestTooWeakError);
    // Still the SHA-256 challenge: the next request is not answered with MD5.
    expect(session.authorize('GET', '/x')!.header).toContain('algorithm=SHA-256');
  });
});

describe('DigestSession', () => {
  it('is not ready (no pre-emptive header) before the first challenge', () => {
    const session = new DigestSession(MUFASA);
    expect(session.ready).toBe(false);
    expect(session.authorize('GET', '/')).toBeUndefined();
  });

  it('gives 100 concurrent requests 100 distinct nonce counts and fresh cnonces', async () => {
    const session = new DigestSession(MUFASA);
    session.onChallenge(`Digest ${RFC_PARAMS}, algorithm=SHA-256`);
    const headers = await Promise.all(
      Array.from({ length: 100 }, async () => {
        await new Promise((r) => setImmediate(r));
        return session.authorize('GET', '/x')!.header;
      }),
    );
    const ncs = headers.map((h) => params(h).nc);
    const cnonces = headers.map((h) => params(h).cnonce);
    expect(new Set(ncs).size).toBe(100);
    expect(new Set(cnonces).size).toBe(100);
    expect([...ncs].sort()).toContain('00000064');
    expect(ncs.every((nc) => /^[0-9a-f]{8}$/.test(nc!))).toBe(true);
  });

  it('resets nc on a new challenge and on nextnonce, and bumps the generation', () => {
    const session = new DigestSession(MUFASA, ANY_DIGEST, () => 'c');
    session.onChallenge('Digest realm="x", nonce="n1", qop="auth"');
    const g1 = session.generation;
    session.authorize('GET', '/');
    expect(params(session.authorize('GET', '/')!.header).nc).toBe('00000002');

    session.onChallenge('Digest realm="x", nonce="n2", qop="auth", stale=true');
    const a = session.authorize('GET', '/')!;
    expect(params(a.header)).toMatchObject({ nonce: 'n2', nc: '00000001' });
    expect(a.fresh).toBe(true);
    expect(session.generation).toBe(g1 + 1);

    session.onAuthenticationInfo('qop=auth, rspauth="abc", cnonce="c", nc=00000001, nextnonce="n3"');
    expect(params(session.authorize('GET', '/')!.header)).toMatchObject({ nonce: 'n3', nc: '00000001' });
    expect(session.generation).toBe(g1 + 2);

    // Authentication-Info without nextnonce changes nothing.
    session.onAuthenticationInfo('rspauth="abc"');
    expect(params(session.authorize('GET', '/')!.header)).toMatchObject({ nonce: 'n3', nc: '00000002' });
  });

  it('keeps counting when a challenge repeats the current nonce (no nc reuse)', () => {
    const session = new DigestSession(MUFASA);
    session.onChallenge('Digest realm="x", nonce="n1", qop="auth"');
    session.authorize('GET', '/');
    session.onChallenge('Digest realm="x", nonce="n1", qop="auth"');
    expect(params(session.authorize('GET', '/')!.header).nc).toBe('00000002');
  });

  it('echoes opaque and the algorithm as the server spelled it, and hashes the username when asked', () => {
    const session = new DigestSession(MUFASA, ANY_DIGEST, () => RFC_CNONCE);
    session.onChallenge(`Digest ${RFC_PARAMS}, algorithm=sha-256, userhash=true`);
    const header = session.authorize('GET', '/dir/index.html')!.header;
    const p = params(header);
    expect(p.algorithm).toBe('sha-256');
    expect(p.userhash).toBe('true');
    // RFC 7616 §3.4.4: username = H(username ":" realm).
    expect(p.username).toBe('a947aad205e80e429958a387394944c6b496301e79f89d35a4cc23b6ee12b5b6');
    expect(header).not.toContain('Circle of Life');
  });
});
