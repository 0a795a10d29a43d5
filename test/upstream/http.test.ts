// HTTP forms a spec-following server may use (H1–H3), each against a real node:http server on
// 127.0.0.1: compressed answers, chunked and Content-Length bodies, and idle keep-alive
// connections closed by the server.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { brotliCompressSync, deflateRawSync, deflateSync, gzipSync } from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { DecodeError, UpstreamTransportError } from '../../src/core/errors.js';
import { PipelineEvents } from '../../src/core/events.js';
import { createUpstreamClient, type UpstreamClientOptions } from '../../src/upstream/client.js';

const JOB = {
  resource_type: 'job',
  id: 10,
  name: 'Ingest Pilot – é',
  // Enough repetition for compression to matter, as with expanded feed pages.
  tag_list: Array.from({ length: 200 }, (_, i) => `tag-${i % 7}`),
};
const BODY = JSON.stringify(JOB);
const DECODED = { ...JOB, tag_list: { entries: JOB.tag_list } };

interface Seen {
  acceptEncoding: string | undefined;
  socket: number;
}

type Handler = (req: IncomingMessage, res: ServerResponse, seen: Seen, socketRequests: number) => void;

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A plain HTTP server (no auth: the client sends credentials only once challenged). */
async function serve(handler: Handler): Promise<{ url: string; seen: Seen[]; server: Server }> {
  const seen: Seen[] = [];
  const sockets = new Map<Socket, number>();
  const perSocket = new Map<Socket, number>();
  const server = createServer((req, res) => {
    const n = (perSocket.get(req.socket) ?? 0) + 1;
    perSocket.set(req.socket, n);
    const s: Seen = { acceptEncoding: req.headers['accept-encoding'], socket: sockets.get(req.socket)! };
    seen.push(s);
    handler(req, res, s, n);
  });
  server.on('connection', (s) => {
    sockets.set(s, sockets.size + 1);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/jobs/10`, seen, server };
}

function client(opts: Partial<UpstreamClientOptions> = {}) {
  const events = new PipelineEvents();
  const codes: string[] = [];
  events.on('http:response', (e) => codes.push(e.code));
  const c = createUpstreamClient({
    source: 'workflow',
    username: 'u',
    password: 'p',
    format: 'json',
    timeoutMs: 3000,
    retry: { attempts: 3, baseMs: 1, maxMs: 5 },
    events,
    ...opts,
  });
  cleanups.push(() => c.close());
  return { client: c, codes };
}

const sendJson = (res: ServerResponse, body: Buffer | string, headers: Record<string, string> = {}) => {
  res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', ...headers });
  res.end(body);
};

describe('H3: compression', () => {
  it.each([
    ['gzip', gzipSync(BODY)],
    ['x-gzip', gzipSync(BODY)],
    ['deflate', deflateSync(BODY)],
    ['deflate', deflateRawSync(BODY)],
    ['br', brotliCompressSync(BODY)],
    ['GZIP', gzipSync(BODY)],
    ['identity', Buffer.from(BODY)],
    ['deflate, br', brotliCompressSync(deflateSync(BODY))],
  ])('Content-Encoding: %s is decoded', async (coding, body) => {
    const { url, seen } = await serve((_req, res) => sendJson(res, body, { 'content-encoding': coding }));
    const { client: c, codes } = client();
    expect(await c.get(url, { kind: 'subject' })).toEqual({
      status: 200,
      url,
      resource: DECODED,
      bytes: expect.any(Number),
    });
    expect(seen.map((s) => s.acceptEncoding)).toEqual(['gzip, deflate, br']);
    expect(codes).toEqual(['200']);
  });

  it('an uncompressed answer to Accept-Encoding is read as is', async () => {
    const { url } = await serve((_req, res) => sendJson(res, BODY));
    expect(await client().client.get(url, { kind: 'subject' })).toMatchObject({ resource: DECODED });
  });

  it('compression: false sends no Accept-Encoding', async () => {
    const { url, seen } = await serve((_req, res) => sendJson(res, BODY));
    expect(await client({ compression: false }).client.get(url, { kind: 'subject' })).toMatchObject({
      resource: DECODED,
    });
    expect(seen).toEqual([{ acceptEncoding: undefined, socket: 1 }]);
  });

  it('a corrupt gzip body is a DecodeError naming the URL, retried', async () => {
    const good = gzipSync(BODY);
    const corrupt = Buffer.concat([good.subarray(0, 20), Buffer.alloc(30, 7)]);
    let n = 0;
    const { url } = await serve((_req, res) =>
      sendJson(res, n++ === 0 ? corrupt : good, { 'content-encoding': 'gzip' }),
    );
    expect(await client().client.get(url, { kind: 'subject' })).toMatchObject({ resource: DECODED });
    expect(n).toBe(2);

    const { url: alwaysBad } = await serve((_req, res) =>
      sendJson(res, corrupt, { 'content-encoding': 'gzip' }),
    );
    const err = await client()
      .client.get(alwaysBad, { kind: 'subject' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DecodeError);
    expect((err as DecodeError).url).toBe(alwaysBad);
    expect((err as DecodeError).reason).toMatch(/cannot decode the gzip body/);
  });

  it('an unsupported coding is a DecodeError saying which', async () => {
    const { url } = await serve((_req, res) => sendJson(res, BODY, { 'content-encoding': 'compress' }));
    const err = await client()
      .client.get(url, { kind: 'subject' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DecodeError);
    expect((err as DecodeError).reason).toMatch(/unsupported Content-Encoding "compress"/);
  });
});

describe('charsets (a form the dialect list does not name: the specs do not pin UTF-8)', () => {
  const NOTE = 'Café naïve – 10 €';
  const xmlBody = (decl: string) => `${decl}<note><body>${NOTE}</body></note>`;
  const expected = { resource_type: 'note', body: NOTE };

  it.each([
    // WHATWG (and so every browser) reads the iso-8859-1 label as windows-1252.
    ['Content-Type charset=ISO-8859-1', 'application/xml; charset=ISO-8859-1', undefined, 'windows-1252'],
    ['Content-Type charset="windows-1252"', 'text/xml; charset="windows-1252"', undefined, 'windows-1252'],
    ['the XML declaration', 'application/xml', undefined, 'declared'],
    ['a UTF-16LE byte-order mark', 'application/xml', undefined, 'utf-16le'],
    ['no charset: UTF-8', 'application/xml', Buffer.from(xmlBody(''), 'utf8'), 'utf-8'],
  ] as [string, string, Buffer | undefined, string][])(
    'XML in a charset given by %s',
    async (_name, ct, given, how) => {
      let body = given;
      if (how === 'windows-1252') body = Buffer.from(new TextEncoderLatin().encode(xmlBody('')));
      if (how === 'declared')
        body = Buffer.from(
          new TextEncoderLatin().encode(xmlBody('<?xml version="1.0" encoding="windows-1252"?>')),
        );
      if (how === 'utf-16le')
        body = Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(xmlBody(''), 'utf16le')]);
      const { url } = await serve((_req, res) => {
        res.writeHead(200, { 'content-type': ct });
        res.end(body);
      });
      expect(await client({ format: 'xml' }).client.get(url, { kind: 'subject' })).toMatchObject({
        resource: expected,
      });
    },
  );

  it('an unknown charset is a DecodeError naming it', async () => {
    const { url } = await serve((_req, res) =>
      sendJson(res, BODY, { 'content-type': 'application/json; charset=x-klingon' }),
    );
    const err = await client()
      .client.get(url, { kind: 'subject' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DecodeError);
    expect((err as DecodeError).reason).toMatch(/unsupported charset "x-klingon"/);
  });
});

/** windows-1252 bytes for text whose characters all exist there (€ is 0x80, unlike latin1). */
class TextEncoderLatin {
  encode(s: string): Uint8Array {
    return Uint8Array.from([...s].map((c) => (c === '€' ? 0x80 : c === '–' ? 0x96 : c.charCodeAt(0))));
  }
}

describe('H2: chunked transfer encoding and Content-Length', () => {
  it('a chunked body written in many pieces', async () => {
    const { url } = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      // No Content-Length and several writes: node sends Transfer-Encoding: chunked.
      const bytes = Buffer.from(BODY);
      for (let i = 0; i < bytes.length; i += 97) res.write(bytes.subarray(i, i + 97));
      res.end();
    });
    expect(await client().client.get(url, { kind: 'subject' })).toMatchObject({ resource: DECODED });
  });

  it('a chunked gzip body', async () => {
    const { url } = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' });
      const bytes = gzipSync(BODY);
      for (let i = 0; i < bytes.length; i += 13) res.write(bytes.subarray(i, i + 13));
      res.end();
    });
    expect(await client().client.get(url, { kind: 'subject' })).toMatchObject({ resource: DECODED });
  });

  it('a Content-Length body, with a multi-byte character split across the writes', async () => {
    const { url } = await serve((_req, res) => {
      const bytes = Buffer.from(BODY);
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(bytes.length) });
      const cut = bytes.indexOf(Buffer.from('é')) + 1;
      res.write(bytes.subarray(0, cut));
      setTimeout(() => res.end(bytes.subarray(cut)), 20);
    });
    expect(await client().client.get(url, { kind: 'subject' })).toMatchObject({ resource: DECODED });
  });
});

describe('the deadline covers the body', () => {
  it('headers on time and a body that stalls: a timeout, the connection not reused', async () => {
    const { url, seen } = await serve((_req, res, _seen, n) => {
      const bytes = Buffer.from(BODY);
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(bytes.length) });
      if (n === 1 && seen.length === 1) res.write(bytes.subarray(0, 10));
      else res.end(bytes);
    });
    const { client: c, codes } = client({ timeoutMs: 150, retry: { attempts: 2, baseMs: 1, maxMs: 2 } });
    const t0 = Date.now();
    expect(await c.get(url, { kind: 'subject' })).toMatchObject({ status: 200, resource: DECODED });
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(codes).toEqual(['timeout', '200']);
    // The stalled connection was abandoned: the retry went out on another one.
    expect(seen.map((s) => s.socket)).toEqual([1, 2]);
  });
});

describe('H1: the server closes idle keep-alive connections', () => {
  it('a GET after the server’s idle timeout goes out on a new connection, nothing counted as failed', async () => {
    const { url, seen, server } = await serve((_req, res) => sendJson(res, BODY));
    server.keepAliveTimeout = 50;
    // A large backoff: a retry counted as a failure would show up as a long wait.
    const { client: c, codes } = client({ retry: { attempts: 3, baseMs: 5000, maxMs: 5000 } });
    await c.get(url, { kind: 'subject' });
    await new Promise((r) => setTimeout(r, 300));
    const started = Date.now();
    expect(await c.get(url, { kind: 'subject' })).toMatchObject({ status: 200, resource: DECODED });
    expect(Date.now() - started).toBeLessThan(2000);
    expect(codes).toEqual(['200', '200']);
    expect(seen.map((s) => s.socket)).toEqual([1, 2]);
  });

  it('a reused connection the server closes as the request arrives: resent at once on a new one', async () => {
    // The race H1 is about: the server's idle timer fires as our request reaches it, so the
    // connection closes without an answer. Here every second request on a connection meets that.
    const dropped: number[] = [];
    const { url, seen } = await serve((req, res, _seen, socketRequests) => {
      if (socketRequests >= 2) {
        dropped.push(seen.length - 1);
        req.socket.destroy();
      } else sendJson(res, BODY);
    });
    const { client: c, codes } = client({ retry: { attempts: 3, baseMs: 5000, maxMs: 5000 } });
    for (let i = 0; i < 6; i++) {
      const started = Date.now();
      expect(await c.get(url, { kind: 'subject' })).toMatchObject({ status: 200, resource: DECODED });
      expect(Date.now() - started).toBeLessThan(2000);
    }
    expect(dropped.length).toBeGreaterThan(0);
    // Each dropped request was sent again at once, on a connection not used before.
    const socketsBefore = (i: number) => new Set(seen.slice(0, i).map((s) => s.socket));
    for (const i of dropped) {
      expect(seen[i + 1]).toBeDefined();
      expect(socketsBefore(i + 1).has(seen[i + 1]!.socket)).toBe(false);
    }
    expect(seen).toHaveLength(6 + dropped.length);
    expect(codes).toEqual(Array(6).fill('200'));
    expect(c.stats().requests).toBe(6);
  });

  it('a server that drops every request still fails, after the counted attempts', async () => {
    const { url, seen } = await serve((req) => req.socket.destroy());
    const { client: c, codes } = client();
    const err = await c.get(url, { kind: 'subject' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UpstreamTransportError);
    expect((err as UpstreamTransportError).code).toBe('network');
    expect(codes).toEqual(['network', 'network', 'network']);
    // Never reused (each connection dies), so no request is resent uncounted.
    expect(seen).toHaveLength(3);
  });
});
