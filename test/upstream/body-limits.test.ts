// Bounded response bodies (src/upstream/dispatch.ts, transport.ts, content-encoding.ts) against
// real node:http servers on 127.0.0.1: a body over maxBodyBytes is refused while it streams —
// at the headers when its Content-Length says so, the moment the bytes pass the limit otherwise,
// for bodies kept and bodies drained alike — and the cut connection is never reused; a compressed
// body is refused once its decoded size passes the limit; invalid UTF-8 is decoded and flagged.
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  brotliCompressSync,
  constants as zlibConstants,
  deflateRawSync,
  deflateSync,
  gzipSync,
} from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { UpstreamRefusedError } from '../../src/core/errors.js';
import { DecodedTooLargeError, decodeContentEncoding } from '../../src/upstream/content-encoding.js';
import { DEFAULT_MAX_BODY_BYTES, send, type SendOptions } from '../../src/upstream/transport.js';
import { Pool } from '../../src/upstream/undici-dispatchers.js';

const MiB = 1024 * 1024;
const LIMIT = 1 * MiB;
/** What the hostile server offers: far more than any test may let through. */
const HUGE = 512 * MiB;
/** Loopback socket buffers hold a few MB; anything near HUGE means the body was read. */
const FAR_BELOW = 32 * MiB;

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function serve(handler: Handler): Promise<{ url: string; pool: Pool; connections: () => number }> {
  let connections = 0;
  const server = createServer(handler);
  server.on('connection', () => connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const pool = new Pool(origin, { connections: 1 });
  cleanups.push(async () => {
    await pool.destroy();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { url: `${origin}/api/jobs/10`, pool, connections: () => connections };
}

function get(pool: Pool, url: string, opts: Partial<SendOptions> = {}) {
  return send(pool, url, {
    path: new URL(url).pathname,
    headers: { accept: 'application/json' },
    timeoutMs: 20_000,
    readBody: (status) => status >= 200 && status < 300,
    compression: true,
    maxBodyBytes: LIMIT,
    ...opts,
  });
}

/**
 * Writes `total` bytes (never built whole) as fast as the client takes them, and resolves with
 * how many the server managed to hand to its socket before the client went away.
 */
function stream(res: ServerResponse, total: number): Promise<number> {
  const chunk = Buffer.alloc(64 * 1024, 0x20);
  let written = 0;
  return new Promise((resolve) => {
    res.on('close', () => resolve(written));
    const pump = (): void => {
      while (written < total && !res.destroyed) {
        written += chunk.length;
        if (!res.write(chunk)) {
          res.once('drain', pump);
          return;
        }
      }
      if (!res.destroyed) res.end();
    };
    pump();
  });
}

async function refused(promise: Promise<unknown>, url: string): Promise<UpstreamRefusedError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(UpstreamRefusedError);
  const refusal = err as UpstreamRefusedError;
  expect(refusal.reason).toBe('body_too_large');
  expect(refusal.url).toBe(url);
  expect(refusal.message).toContain(url);
  expect(refusal.message).toContain(`max_body_bytes (${LIMIT} bytes)`);
  expect(refusal.retryable).toBe(false);
  return refusal;
}

describe('on the wire', () => {
  it.each([
    ['a success', 200],
    ['an error answer (drained, not kept)', 500],
  ])(
    '%s whose Content-Length is over the limit: refused at the headers, the body not read',
    async (_name, status) => {
      let written: Promise<number> | undefined;
      const { url, pool, connections } = await serve((req, res) => {
        if (req.url === '/ok') return res.end('{"resource_type":"job","id":1}');
        res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(HUGE) });
        res.flushHeaders();
        // The headers alone must do: the body only starts once the client had time to go away.
        written = new Promise((resolve) => {
          const timer = setTimeout(() => resolve(stream(res, HUGE)), 300);
          res.on('close', () => {
            clearTimeout(timer);
            resolve(0);
          });
        });
      });
      const err = await refused(get(pool, url), url);
      expect(err.message).toBe(
        `refused GET ${url}: Content-Length (${HUGE} bytes) is larger than max_body_bytes (${LIMIT} bytes)`,
      );
      expect(await written).toBe(0);
      // The cut connection is gone: the next request opens another.
      const ok = await get(pool, url.replace('/api/jobs/10', '/ok'));
      expect(ok.status).toBe(200);
      expect(connections()).toBe(2);
    },
  );

  it.each([
    ['a chunked success', 200],
    ['a chunked error answer (drained, not kept)', 500],
  ])('%s growing past the limit: cut as it passes it', async (_name, status) => {
    let written: Promise<number> | undefined;
    const { url, pool, connections } = await serve((req, res) => {
      if (req.url === '/ok') return res.end('{"resource_type":"job","id":1}');
      res.writeHead(status, { 'content-type': 'application/json' });
      written = stream(res, HUGE);
    });
    const err = await refused(get(pool, url), url);
    expect(err.message).toBe(`refused GET ${url}: body is larger than max_body_bytes (${LIMIT} bytes)`);
    expect(await written).toBeLessThan(FAR_BELOW);
    expect((await get(pool, url.replace('/api/jobs/10', '/ok'))).status).toBe(200);
    expect(connections()).toBe(2);
  });

  it('a body of exactly the limit is read; one byte more is refused', async () => {
    const { url, pool } = await serve((req, res) => {
      const size = req.url === '/over' ? LIMIT + 1 : LIMIT;
      const body = Buffer.alloc(size, 0x20);
      body.write('{"resource_type":"job"}');
      res.writeHead(200, { 'content-type': 'application/json' });
      // Chunked: only the byte count can tell.
      res.write(body.subarray(0, 1000));
      res.end(body.subarray(1000));
    });
    expect((await get(pool, url)).body).toHaveLength(LIMIT);
    await refused(get(pool, url.replace('/api/jobs/10', '/over')), url.replace('/api/jobs/10', '/over'));
  });

  it('without maxBodyBytes the default (8 MiB) applies', async () => {
    const { url, pool } = await serve((_req, res) => {
      res.writeHead(200, { 'content-length': String(DEFAULT_MAX_BODY_BYTES + 1) });
      void stream(res, DEFAULT_MAX_BODY_BYTES + 1);
    });
    const err = await get(pool, url, { maxBodyBytes: undefined }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UpstreamRefusedError);
    expect((err as Error).message).toContain(`max_body_bytes (${DEFAULT_MAX_BODY_BYTES} bytes)`);
  });
});

describe('decoded', () => {
  /** 64 MiB of JSON-ish whitespace: ~64 KB of gzip, ~50 bytes of brotli. */
  const plain = Buffer.alloc(64 * MiB, 0x20);
  const bombs = {
    gzip: gzipSync(plain, { level: 9 }),
    br: brotliCompressSync(plain, { params: { [zlibConstants.BROTLI_PARAM_QUALITY]: 5 } }),
    deflate: deflateSync(plain, { level: 9 }),
  };
  // Over the 256 KB the synchronous path takes: incompressible bytes first, then the bomb.
  const bigBomb = gzipSync(Buffer.concat([randomBytes(300 * 1024), Buffer.alloc(16 * MiB, 0x20)]));

  it.each([
    ['gzip', bombs.gzip],
    ['br', bombs.br],
    ['deflate', bombs.deflate],
    ['gzip', bigBomb],
  ] as const)('a %s bomb (%#) is refused as decoded-too-large', async (coding, bomb) => {
    expect(bomb.length).toBeLessThan(LIMIT);
    const { url, pool } = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': coding });
      res.end(bomb);
    });
    const err = await refused(get(pool, url), url);
    expect(err.message).toBe(
      `refused GET ${url}: decoded ${coding} body is larger than max_body_bytes (${LIMIT} bytes)`,
    );
  });

  it.each([
    ['gzip', gzipSync],
    ['deflate', deflateSync],
    ['deflate', deflateRawSync],
    ['br', brotliCompressSync],
  ] as const)(
    'decodeContentEncoding: %s output stops at the limit, and the limit itself passes',
    async (coding, encode) => {
      const exact = Buffer.alloc(LIMIT, 0x61);
      expect((await decodeContentEncoding(encode(exact), coding, LIMIT)).length).toBe(LIMIT);
      const over = encode(Buffer.alloc(LIMIT + 1, 0x61));
      await expect(decodeContentEncoding(over, coding, LIMIT)).rejects.toThrow(DecodedTooLargeError);
      // Nested codings: each step is bounded.
      await expect(decodeContentEncoding(gzipSync(over), `${coding}, gzip`, LIMIT)).rejects.toThrow(
        DecodedTooLargeError,
      );
    },
  );
});

describe('invalid UTF-8', () => {
  const bad = Buffer.concat([
    Buffer.from('{"resource_type":"job","name":"a'),
    Buffer.from([0xff, 0xc3, 0x28]),
    Buffer.from('b"}'),
  ]);

  async function answer(body: Buffer, headers: Record<string, string>) {
    const { url, pool } = await serve((_req, res) => {
      res.writeHead(200, headers);
      res.end(body);
    });
    return get(pool, url);
  }

  it.each([
    ['charset=utf-8', { 'content-type': 'application/json; charset=utf-8' }, bad],
    ['charset=UTF8', { 'content-type': 'application/json; charset=UTF8' }, bad],
    ['no charset (UTF-8 by default)', { 'content-type': 'application/json' }, bad],
    ['gzip', { 'content-type': 'application/json', 'content-encoding': 'gzip' }, gzipSync(bad)],
  ])('%s: decoded with U+FFFD and flagged', async (_name, headers, body) => {
    const res = await answer(body, headers);
    expect(res.invalidUtf8).toBe(true);
    expect(res.body).toBe('{"resource_type":"job","name":"a\ufffd\ufffd(b"}');
  });

  it.each([
    ['valid UTF-8', { 'content-type': 'application/json; charset=utf-8' }, Buffer.from('{"name":"é ☺ 𝄞"}')],
    ['ISO-8859-1', { 'content-type': 'application/json; charset=iso-8859-1' }, bad],
    ['windows-1252', { 'content-type': 'application/xml; charset=windows-1252' }, bad],
    [
      'UTF-16 with a BOM',
      { 'content-type': 'application/json' },
      Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from('{"name":"é"}', 'utf16le')]),
    ],
  ])('%s: not flagged', async (_name, headers, body) => {
    const res = await answer(body, headers);
    expect(res.invalidUtf8).toBeUndefined();
    expect(res.body).not.toContain('\ufffd');
  });
});
