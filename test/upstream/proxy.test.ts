// Proxies (issue #19): HTTP_PROXY / HTTPS_PROXY / NO_PROXY from the environment, or the source's
// own `proxy`, through a REAL forward proxy on loopback (tinyproxy): plain http upstreams are
// forwarded (absolute-form GET), https ones tunnelled (CONNECT). Each test proves the route from
// tinyproxy's log and that the upstream still checked Digest auth.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { UpstreamTransportError } from '../../src/core/errors.js';
import { PipelineEvents } from '../../src/core/events.js';
import { createUpstreamClient, type UpstreamClientOptions } from '../../src/upstream/client.js';
import { DigestServer, type Reply } from './support/digest-server.js';
import { createPki, startTlsFront, type Pki, type TlsFront } from './support/pki.js';
import { startTinyproxy, type Tinyproxy } from './support/tinyproxy.js';

const USER = 'feedsync';
const PASSWORD = 'proxied s3cret';
const PROXY_USER = 'proxy-user';
const PROXY_PASSWORD = 'proxy-pa55word';
const TITLE: Reply = {
  status: 200,
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ resource_type: 'title', id: 42, name: 'Pilot' }),
};
const PROXY_VARS = ['http_proxy', 'HTTP_PROXY', 'https_proxy', 'HTTPS_PROXY', 'no_proxy', 'NO_PROXY'];

let pki: Pki;
let proxy: Tinyproxy;
let authProxy: Tinyproxy;
const savedEnv: Record<string, string | undefined> = {};
beforeAll(async () => {
  for (const name of PROXY_VARS) savedEnv[name] = process.env[name];
  pki = createPki();
  proxy = await startTinyproxy();
  authProxy = await startTinyproxy({ basicAuth: { user: PROXY_USER, password: PROXY_PASSWORD } });
});
afterAll(async () => {
  await proxy?.stop();
  await authProxy?.stop();
  pki?.cleanup();
});

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  // Every test starts (and the file ends) with the environment it found.
  for (const name of PROXY_VARS) {
    if (savedEnv[name] === undefined) delete process.env[name];
    else process.env[name] = savedEnv[name];
  }
});

/** The proxy environment for one test: the variables given, none of the others. */
function proxyEnv(vars: Record<string, string>): void {
  for (const name of PROXY_VARS) delete process.env[name];
  Object.assign(process.env, vars);
}

async function httpUpstream(): Promise<DigestServer> {
  const s = await DigestServer.start({ username: USER, password: PASSWORD });
  s.route('/api/titles/42', TITLE);
  cleanups.push(() => s.close());
  return s;
}

async function httpsUpstream(opts: { requireClientCert?: boolean } = {}): Promise<{
  backend: DigestServer;
  front: TlsFront;
}> {
  const backend = await httpUpstream();
  const front = await startTlsFront(pki, Number(new URL(backend.origin).port), opts);
  cleanups.push(() => front.close());
  return { backend, front };
}

function client(baseUrl: string, opts: Partial<UpstreamClientOptions> = {}) {
  const events = new PipelineEvents();
  const codes: string[] = [];
  events.on('http:response', (e) => codes.push(e.code));
  const c = createUpstreamClient({
    source: 'scheduling',
    username: USER,
    password: PASSWORD,
    format: 'json',
    timeoutMs: 5000,
    retry: { attempts: 2, baseMs: 1, maxMs: 2 },
    events,
    baseUrl,
    ...opts,
  });
  cleanups.push(() => c.close());
  return { client: c, codes };
}

/** The request lines `p` logged while `fn` ran. */
async function logged(p: Tinyproxy, fn: () => Promise<unknown>): Promise<string[]> {
  const before = p.requests().length;
  await fn();
  return p.requests().slice(before);
}

async function rejection(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a rejection');
}

/** The upstream saw a Digest challenge, then Digest-signed requests that it accepted. */
function expectDigest(backend: DigestServer, successes: number): void {
  expect(backend.requests.map((r) => r.outcome)).toEqual(['401', ...Array(successes).fill('200')]);
  for (const r of backend.requests.slice(1)) expect(r.authorization).toMatch(/^Digest .*username="feedsync"/);
}

describe('proxies from the environment', () => {
  it('HTTP_PROXY: an http upstream is reached through the proxy (absolute-form GETs)', async () => {
    const backend = await httpUpstream();
    proxyEnv({ HTTP_PROXY: proxy.url });
    const { client: c, codes } = client(backend.origin);
    const lines = await logged(proxy, async () => {
      for (let i = 0; i < 3; i++) await c.get(backend.url('/api/titles/42'), { kind: 'subject' });
    });
    // Every request the upstream saw, 401 included, went through tinyproxy.
    expect(lines).toEqual(Array(4).fill(`GET ${backend.url('/api/titles/42')} HTTP/1.1`));
    expectDigest(backend, 3);
    expect(codes).toEqual(['401', '200', '200', '200']);
  });

  it('HTTPS_PROXY: an https upstream is reached through a CONNECT tunnel, ca_file inside it', async () => {
    const { backend, front } = await httpsUpstream();
    proxyEnv({ HTTPS_PROXY: proxy.url });
    const { client: c } = client(front.origin, { caFile: pki.caFile });
    const lines = await logged(proxy, async () => {
      for (let i = 0; i < 3; i++) await c.get(`${front.origin}/api/titles/42`, { kind: 'subject' });
    });
    expect(lines.length).toBeGreaterThan(0);
    expect(new Set(lines)).toEqual(new Set([`CONNECT 127.0.0.1:${front.port} HTTP/1.1`]));
    // One TLS handshake with the upstream per tunnel: the TLS went through the proxy, end to end.
    expect(front.handshakes).toBe(lines.length);
    expectDigest(backend, 3);
  });

  it('HTTPS_PROXY with a client certificate: the mTLS upstream gets it through the tunnel', async () => {
    const { backend, front } = await httpsUpstream({ requireClientCert: true });
    proxyEnv({ https_proxy: proxy.url });
    const { client: c } = client(front.origin, {
      caFile: pki.caFile,
      certFile: pki.clientCertFile,
      keyFile: pki.clientKeyFile,
    });
    const lines = await logged(proxy, () => c.get(`${front.origin}/api/titles/42`, { kind: 'subject' }));
    expect(lines.every((l) => l === `CONNECT 127.0.0.1:${front.port} HTTP/1.1`)).toBe(true);
    expect(new Set(front.clientCerts)).toEqual(new Set(['client']));
    expectDigest(backend, 1);
  });

  it('HTTP_PROXY alone also serves https upstreams (as undici, curl differs)', async () => {
    const { backend, front } = await httpsUpstream();
    proxyEnv({ HTTP_PROXY: proxy.url });
    const { client: c } = client(front.origin, { caFile: pki.caFile });
    const lines = await logged(proxy, () => c.get(`${front.origin}/api/titles/42`, { kind: 'subject' }));
    expect(lines[0]).toBe(`CONNECT 127.0.0.1:${front.port} HTTP/1.1`);
    expectDigest(backend, 1);
  });

  it('NO_PROXY exempts a host: the request goes straight to it', async () => {
    const backend = await httpUpstream();
    proxyEnv({ HTTP_PROXY: proxy.url, NO_PROXY: 'localhost,127.0.0.1' });
    const { client: c } = client(backend.origin);
    const lines = await logged(proxy, () => c.get(backend.url('/api/titles/42'), { kind: 'subject' }));
    expect(lines).toEqual([]);
    expectDigest(backend, 1);
  });

  it('HTTPS_PROXY does not apply to http upstreams', async () => {
    const backend = await httpUpstream();
    proxyEnv({ HTTPS_PROXY: 'http://127.0.0.1:1' });
    const { client: c } = client(backend.origin);
    expect(await c.get(backend.url('/api/titles/42'), { kind: 'subject' })).toMatchObject({ status: 200 });
    expectDigest(backend, 1);
  });

  it('an unusable proxy variable fails client creation, its password redacted', () => {
    proxyEnv({ HTTPS_PROXY: 'socks9://user:hunter2@proxy:1080' });
    let message = '';
    try {
      client('https://127.0.0.1:1');
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toBe(
      'HTTPS_PROXY (environment, for source scheduling): ' +
        'socks9://user:<redacted>@proxy:1080 is not an http:// or https:// URL',
    );
  });

  it('a network error through the proxy names it, password redacted', async () => {
    proxyEnv({ HTTP_PROXY: `http://someone:hunter2@127.0.0.1:1` });
    const { client: c } = client('http://127.0.0.1:2');
    const err = await rejection(c.get('http://127.0.0.1:2/api/titles/42', { kind: 'subject' }));
    expect(err).toBeInstanceOf(UpstreamTransportError);
    expect(err.message).toMatch(/ECONNREFUSED/);
    expect(err.message).toContain('(via proxy http://someone:<redacted>@127.0.0.1:1 from HTTP_PROXY)');
    expect(`${err.message} ${err.stack}`).not.toContain('hunter2');
  });
});

describe('the source proxy option', () => {
  it('sends the proxy credentials from its URL; the upstream still gets Digest auth', async () => {
    const backend = await httpUpstream();
    // The environment names a dead proxy: the option wins.
    proxyEnv({ HTTP_PROXY: 'http://127.0.0.1:1' });
    const { client: c } = client(backend.origin, {
      proxy: `http://${PROXY_USER}:${PROXY_PASSWORD}@127.0.0.1:${authProxy.port}`,
    });
    const lines = await logged(authProxy, async () => {
      for (let i = 0; i < 2; i++) await c.get(backend.url('/api/titles/42'), { kind: 'subject' });
    });
    expect(lines).toEqual(Array(3).fill(`GET ${backend.url('/api/titles/42')} HTTP/1.1`));
    expectDigest(backend, 2);
    // The proxy's credentials are for the proxy only.
    for (const r of backend.requests) expect(JSON.stringify(r)).not.toContain(PROXY_PASSWORD);
  });

  it('tunnels https upstreams through an authenticating proxy', async () => {
    const { backend, front } = await httpsUpstream();
    const { client: c } = client(front.origin, {
      proxy: `http://${PROXY_USER}:${PROXY_PASSWORD}@127.0.0.1:${authProxy.port}`,
      caFile: pki.caFile,
    });
    const lines = await logged(authProxy, () => c.get(`${front.origin}/api/titles/42`, { kind: 'subject' }));
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.every((l) => l === `CONNECT 127.0.0.1:${front.port} HTTP/1.1`)).toBe(true);
    expectDigest(backend, 1);
  });

  // tinyproxy answers a missing Proxy-Authorization with 407 and a wrong one with 401: undici
  // turns a 407 into an error, and a 401 on a forwarded request reaches the client as the
  // upstream's own (no Digest challenge in it, so it is refused as such).
  it.each([
    [
      'forwarded, no credentials',
      false,
      '',
      /^network error .*Proxy Authentication Required \(407\) \(via proxy/,
    ],
    [
      'forwarded, wrong password',
      false,
      `${PROXY_USER}:wrong-${PROXY_PASSWORD}@`,
      /^authentication failed .*no Digest challenge/,
    ],
    [
      'tunnelled, no credentials',
      true,
      '',
      /^network error .*Proxy response \(407\) !== 200 when HTTP Tunneling \(via proxy/,
    ],
    [
      'tunnelled, wrong password',
      true,
      `${PROXY_USER}:wrong-${PROXY_PASSWORD}@`,
      /^network error .*Proxy response \(401\) .*\(via proxy http:\/\/proxy-user:<redacted>@/,
    ],
  ])(
    'refused by the proxy (%s): the upstream gets nothing, the password is never shown',
    async (_name, tls, userinfo, message) => {
      const backend = await httpUpstream();
      const front = tls ? await startTlsFront(pki, Number(new URL(backend.origin).port)) : undefined;
      if (front) cleanups.push(() => front.close());
      const origin = front?.origin ?? backend.origin;
      const { client: c } = client(origin, {
        proxy: `http://${userinfo}127.0.0.1:${authProxy.port}`,
        caFile: pki.caFile,
      });
      const err = await rejection(c.get(`${origin}/api/titles/42`, { kind: 'subject' }));
      expect(err.message).toMatch(message);
      expect(`${err.message} ${err.stack}`).not.toContain(PROXY_PASSWORD);
      expect(backend.requests).toEqual([]);
    },
  );
});
