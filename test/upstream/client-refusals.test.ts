// The client is the one place that reports refusals and invalid UTF-8 (issue #19): a refusal
// from the transport (body_too_large) or the decoder (too_deep) is reported once and never
// retried; a 2xx body with invalid UTF-8 is reported once per response, with one warning.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { UpstreamRefusedError } from '../../src/core/errors.js';
import { PipelineEvents } from '../../src/core/events.js';
import { BodyOverCapError, createUpstreamClient } from '../../src/upstream/client.js';
import { DigestServer } from './support/digest-server.js';

const USER = 'feedsync';
const PASSWORD = 'refusal s3cret';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function setup(body: string, baseUrl?: string) {
  const server = await DigestServer.start({ username: USER, password: PASSWORD });
  server.route('/api/titles/42', { status: 200, headers: { 'content-type': 'application/json' }, body });
  const events = new PipelineEvents();
  const refused: unknown[] = [];
  const invalid: unknown[] = [];
  const warnings: { obj: unknown; msg: string }[] = [];
  events.on('upstream:refused', (e) => refused.push(e));
  events.on('upstream:invalid-utf8', (e) => invalid.push(e));
  const logger = { warn: (obj: unknown, msg: string) => warnings.push({ obj, msg }) } as unknown as Logger;
  const client = createUpstreamClient({
    source: 'workflow',
    username: USER,
    password: PASSWORD,
    format: 'json',
    timeoutMs: 2000,
    retry: { attempts: 4, baseMs: 1, maxMs: 2 },
    events,
    logger,
    baseUrl: baseUrl ?? server.origin,
    maxBodyBytes: 65_536,
  });
  cleanups.push(
    () => server.close(),
    () => client.close(),
  );
  return { server, client, refused, invalid, warnings, url: server.url('/api/titles/42') };
}

async function refusal(p: Promise<unknown>): Promise<UpstreamRefusedError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(UpstreamRefusedError);
    return err as UpstreamRefusedError;
  }
  throw new Error('expected a refusal');
}

describe('refusals from the transport and the decoder', () => {
  it('a body over maxBodyBytes: body_too_large, reported once, not retried', async () => {
    const big = JSON.stringify({ resource_type: 'title', id: 42, name: 'x'.repeat(100_000) });
    const { server, client, refused, warnings, url } = await setup(big);
    const err = await refusal(client.get(url, { kind: 'subject' }));
    expect(err.reason).toBe('body_too_large');
    expect(refused).toEqual([{ source: 'workflow', reason: 'body_too_large', url }]);
    expect(server.requests.map((r) => r.outcome)).toEqual(['401', '200']);
    expect(warnings).toEqual([]);
  });

  it("a body over the request's own cap (a page budget's first share): BodyOverCapError, neither reported nor retried; asked again without it, delivered", async () => {
    const body = JSON.stringify({ resource_type: 'title', id: 42, name: 'x'.repeat(40_000) });
    const { server, client, refused, url } = await setup(body);
    const err = await client.get(url, { kind: 'subject', maxBodyBytes: 16_384 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BodyOverCapError);
    expect((err as BodyOverCapError).cap).toBe(16_384);
    expect(refused).toEqual([]);
    expect(server.requests.map((r) => r.outcome)).toEqual(['401', '200']);
    const whole = await client.get(url, { kind: 'subject' });
    expect(whole).toMatchObject({ status: 200, bytes: Buffer.byteLength(body) });
    // A cap at or above the source's max_body_bytes is the source's limit: a refusal as ever.
    const big = JSON.stringify({ resource_type: 'title', id: 42, name: 'x'.repeat(100_000) });
    server.route('/api/titles/42', {
      status: 200,
      headers: { 'content-type': 'application/json' },
      body: big,
    });
    expect((await refusal(client.get(url, { kind: 'subject', maxBodyBytes: 65_536 }))).reason).toBe(
      'body_too_large',
    );
  });

  it('a body nested too deep: too_deep, reported once, not retried', async () => {
    const deep = `{"resource_type":"title","id":42,"x":${'['.repeat(200)}${']'.repeat(200)}}`;
    const { server, client, refused, url } = await setup(deep);
    expect((await refusal(client.get(url, { kind: 'subject' }))).reason).toBe('too_deep');
    expect(refused).toEqual([{ source: 'workflow', reason: 'too_deep', url }]);
    expect(server.requests.map((r) => r.outcome)).toEqual(['401', '200']);
  });
});

describe('invalid UTF-8', () => {
  it('is reported once per response, with one warning naming the source and URL', async () => {
    const body = Buffer.concat([
      Buffer.from('{"resource_type":"title","id":42,"name":"Pi'),
      Buffer.from([0xff, 0xfe]),
      Buffer.from('lot"}'),
    ]);
    // A plain server (it never challenges, so the client sends no credentials) writing raw bytes.
    const server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(body);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    });
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const { client, invalid, warnings } = await setup('{}', origin);
    const url = `${origin}/api/titles/42`;
    for (let i = 0; i < 2; i++) {
      expect(await client.get(url, { kind: 'subject' })).toMatchObject({
        status: 200,
        resource: { name: 'Pi\uFFFD\uFFFDlot' },
      });
    }
    expect(invalid).toEqual([
      { source: 'workflow', url },
      { source: 'workflow', url },
    ]);
    const warning = {
      obj: { source: 'workflow', kind: 'subject', url },
      msg: 'response is not valid UTF-8; invalid bytes replaced by U+FFFD',
    };
    expect(warnings).toEqual([warning, warning]);
  });
});
