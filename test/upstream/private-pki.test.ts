// A source's private PKI (issue #19): `ca_file` is the trust store of its upstream TLS, and
// `cert_file` + `key_file` its client certificate, for servers that require one. The PKI is made
// for the run with the openssl CLI; the https upstream is a node:tls front to a DigestServer.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, UpstreamTransportError } from '../../src/core/errors.js';
import { createUpstreamClient, type UpstreamClientOptions } from '../../src/upstream/client.js';
import { DigestServer, type Reply } from './support/digest-server.js';
import { createPki, startTlsFront, type Pki, type TlsFront } from './support/pki.js';

const USER = 'feedsync';
const PASSWORD = 'pki s3cret';
const TITLE: Reply = {
  status: 200,
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ resource_type: 'title', id: 42, name: 'Pilot' }),
};

let pki: Pki;
beforeAll(() => {
  pki = createPki();
});
afterAll(() => pki.cleanup());

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function upstream(opts: { requireClientCert?: boolean } = {}): Promise<{
  backend: DigestServer;
  front: TlsFront;
}> {
  const backend = await DigestServer.start({ username: USER, password: PASSWORD });
  backend.route('/api/titles/42', TITLE);
  const front = await startTlsFront(pki, Number(new URL(backend.origin).port), opts);
  cleanups.push(
    () => backend.close(),
    () => front.close(),
  );
  return { backend, front };
}

function client(front: TlsFront, opts: Partial<UpstreamClientOptions>) {
  const c = createUpstreamClient({
    source: 'workflow',
    username: USER,
    password: PASSWORD,
    format: 'json',
    timeoutMs: 3000,
    retry: { attempts: 2, baseMs: 1, maxMs: 2 },
    baseUrl: front.origin,
    ...opts,
  });
  cleanups.push(() => c.close());
  return c;
}

async function rejection(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a rejection');
}

describe('ca_file', () => {
  it('an upstream certified by a private CA is reached with ca_file, Digest auth as usual', async () => {
    const { backend, front } = await upstream();
    const c = client(front, { caFile: pki.caFile });
    for (let i = 0; i < 6; i++) {
      expect(await c.get(`${front.origin}/api/titles/42`, { kind: 'subject' })).toMatchObject({
        status: 200,
      });
    }
    expect(backend.requests.map((r) => r.outcome)).toEqual(['401', ...Array(6).fill('200')]);
    // Keep-alive TLS connections (the 401's round trip may open a second one).
    expect(front.handshakes).toBeLessThanOrEqual(2);
  });

  it('without ca_file the same upstream is refused, the error naming the certificate problem', async () => {
    const { backend, front } = await upstream();
    const err = await rejection(client(front, {}).get(`${front.origin}/api/titles/42`, { kind: 'subject' }));
    expect(err).toBeInstanceOf(UpstreamTransportError);
    expect(err.message).toMatch(/certificate/i);
    expect(err.message).toContain(`${front.origin}/api/titles/42`);
    expect(backend.requests).toEqual([]);
  });

  it('ca_file is the whole trust store: another CA does not vouch for the server', async () => {
    const { backend, front } = await upstream();
    const c = client(front, { caFile: pki.otherCaFile });
    const err = await rejection(c.get(`${front.origin}/api/titles/42`, { kind: 'subject' }));
    expect(err).toBeInstanceOf(UpstreamTransportError);
    expect(err.message).toMatch(/certificate/i);
    expect(backend.requests).toEqual([]);
  });
});

describe('cert_file + key_file (mTLS)', () => {
  it('a server requiring a client certificate is reached with cert_file and key_file', async () => {
    const { backend, front } = await upstream({ requireClientCert: true });
    const c = client(front, { caFile: pki.caFile, certFile: pki.clientCertFile, keyFile: pki.clientKeyFile });
    expect(await c.get(`${front.origin}/api/titles/42`, { kind: 'subject' })).toMatchObject({ status: 200 });
    expect(front.clientCerts.length).toBeGreaterThan(0);
    expect(new Set(front.clientCerts)).toEqual(new Set(['client']));
    expect(backend.requests.map((r) => r.outcome)).toEqual(['401', '200']);
  });

  it('and refuses the client without them', async () => {
    const { backend, front } = await upstream({ requireClientCert: true });
    const err = await rejection(
      client(front, { caFile: pki.caFile }).get(`${front.origin}/api/titles/42`, { kind: 'subject' }),
    );
    expect(err).toBeInstanceOf(UpstreamTransportError);
    expect(backend.requests).toEqual([]);
    expect(front.handshakes).toBe(0);
  });
});

describe('unusable PEM files fail at client creation, naming the key and the path', () => {
  const base = {
    source: 'workflow',
    username: USER,
    password: PASSWORD,
    format: 'json',
    timeoutMs: 1000,
  } as const;

  it.each([
    [
      'ca_file',
      { caFile: '/nonexistent/ca.pem' },
      /^ca_file of source workflow: cannot read \/nonexistent\/ca\.pem \(ENOENT\)$/,
    ],
    [
      'cert_file',
      { certFile: '/nonexistent/c.pem', keyFile: '/nonexistent/k.pem' },
      /^cert_file of source workflow: cannot read \/nonexistent\/c\.pem \(ENOENT\)$/,
    ],
  ])('%s missing', (_key, opts, message) => {
    expect(() => createUpstreamClient({ ...base, ...opts })).toThrow(ConfigError);
    expect(() => createUpstreamClient({ ...base, ...opts })).toThrow(message);
  });

  it('a ca_file without a certificate', () => {
    const file = join(pki.dir, 'empty-bundle.pem');
    writeFileSync(file, 'not a certificate\n');
    expect(() => createUpstreamClient({ ...base, caFile: file })).toThrow(
      `ca_file of source workflow: ${file} holds no PEM certificate`,
    );
  });

  it('a key that does not match the certificate', () => {
    let message = '';
    try {
      createUpstreamClient({ ...base, certFile: pki.clientCertFile, keyFile: pki.serverKeyFile });
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      message = (err as Error).message;
    }
    expect(message).toContain(
      `cert_file/key_file of source workflow: ${pki.clientCertFile} and ${pki.serverKeyFile} ` +
        'are not a usable PEM certificate and key',
    );
    expect(message).toMatch(/mismatch/);
  });

  it('cert_file without key_file', () => {
    expect(() => createUpstreamClient({ ...base, certFile: pki.clientCertFile })).toThrow(
      'key_file of source workflow: cert_file and key_file go together',
    );
  });
});

describe('no downgrade from https to http on the same host (issue #28 item 5)', () => {
  it('a redirect from the https upstream to its own host over http is not followed', async () => {
    const { backend, front } = await upstream();
    const plain = `http://127.0.0.1:${new URL(backend.origin).port}/api/titles/43`;
    backend.route('/api/titles/42', { status: 302, headers: { location: plain }, body: '' });
    backend.route('/api/titles/43', TITLE);
    const err = await rejection(
      client(front, { caFile: pki.caFile }).get(`${front.origin}/api/titles/42`, { kind: 'subject' }),
    );
    expect(err.message).toContain(`HTTP 302 on GET ${front.origin}/api/titles/42`);
    // Only the redirecting path was asked for, over TLS; nothing went to the http URL.
    expect(backend.requests.map((r) => r.path)).toEqual(['/api/titles/42', '/api/titles/42']);
  });

  it('a link from the https upstream to its own host over http is refused before any request', async () => {
    const { backend, front } = await upstream();
    const plain = `http://127.0.0.1:${new URL(backend.origin).port}/api/titles/42`;
    const err = await rejection(client(front, { caFile: pki.caFile }).get(plain, { kind: 'subject' }));
    expect(err).toMatchObject({ reason: 'insecure_link' });
    expect(backend.requests).toEqual([]);
  });
});
