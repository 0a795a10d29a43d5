// Small helpers for answering over node:http: format negotiation, rendering a resource as JSON or
// XML in a dialect, and sending a complete response (compressed when asked, framed by length or
// chunked as the dialect says).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import type { Dialect } from './dialect.js';
import { toJsonText } from './representation.js';
import { toXmlDocument, type XmlWriteOptions } from './xml-writer.js';
import type { Resource } from '../core/resource.js';

export type Format = 'json' | 'xml';

export const CONTENT_TYPES: Record<Format, string> = {
  json: 'application/json; charset=utf-8',
  xml: 'application/xml; charset=utf-8',
};

const JSON_TYPES: Record<Dialect['jsonContentType'], string> = {
  plain: 'application/json',
  charset: 'application/json; charset=utf-8',
  vendor: 'application/vnd.feedsync-upstream.v1+json',
};

const XML_TYPES: Record<Dialect['xmlContentType'], string> = {
  application: 'application/xml',
  'application-charset': 'application/xml; charset=utf-8',
  text: 'text/xml',
  'text-charset': 'text/xml; charset=utf-8',
};

/** `Accept: application/json` gives JSON; XML for application/xml, * / * or no Accept (spec). */
export function negotiate(req: IncomingMessage): Format {
  const accept = (req.headers.accept ?? '').toLowerCase();
  const json = accept.indexOf('application/json');
  const xml = accept.indexOf('application/xml');
  return json >= 0 && (xml < 0 || json < xml) ? 'json' : 'xml';
}

export interface Body {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/** How a response leaves the server: compression (when the request asks) and framing. */
export interface Delivery {
  acceptEncoding?: string | undefined;
  compression: boolean;
  transfer: Dialect['transfer'];
}

/** Renders an already presented resource (see representation.ts) in the dialect's syntax. */
export function renderResource(res: Resource, format: Format, xml: XmlWriteOptions, dialect?: Dialect): Body {
  const text =
    format === 'json'
      ? dialect
        ? toJsonText(res, dialect)
        : JSON.stringify(res)
      : toXmlDocument(res, dialect ? { ...xml, syntax: dialect } : xml);
  const type = dialect
    ? format === 'json'
      ? JSON_TYPES[dialect.jsonContentType]
      : XML_TYPES[dialect.xmlContentType]
    : CONTENT_TYPES[format];
  return { status: 200, headers: { 'content-type': type }, body: Buffer.from(text, 'utf8') };
}

export function textBody(status: number, text: string, extra: Record<string, string | string[]> = {}): Body {
  const headers = text === '' ? extra : { 'content-type': 'text/plain; charset=utf-8', ...extra };
  return { status, headers: headers as Record<string, string>, body: Buffer.from(text, 'utf8') };
}

export function send(res: ServerResponse, b: Body, delivery?: Delivery): void {
  if (res.destroyed || res.headersSent) return;
  let body = b.body;
  const headers: Record<string, string | string[]> = { ...b.headers };
  if (delivery?.compression && b.status === 200 && body.length > 0) {
    const coding = pickEncoding(delivery.acceptEncoding);
    if (coding) {
      body = COMPRESS[coding](body);
      headers['content-encoding'] = coding;
    }
    headers.vary = 'Accept-Encoding';
  }
  if (delivery?.transfer === 'chunked' && body.length > 0) {
    // No Content-Length: Node frames the body as chunks, here two of them.
    res.writeHead(b.status, headers);
    const half = Math.ceil(body.length / 2);
    res.write(body.subarray(0, half));
    res.end(body.subarray(half));
    return;
  }
  res.writeHead(b.status, { ...headers, 'content-length': String(body.length) });
  res.end(body);
}

const COMPRESS: Record<'br' | 'gzip' | 'deflate', (b: Buffer) => Buffer> = {
  br: (b) => brotliCompressSync(b),
  gzip: (b) => gzipSync(b),
  // HTTP's "deflate" is the zlib format (RFC 9110 §8.4.1.2), not raw deflate.
  deflate: (b) => deflateSync(b),
};

/** The best coding the request accepts (q > 0), br before gzip before deflate; undefined: identity. */
export function pickEncoding(header: string | undefined): 'br' | 'gzip' | 'deflate' | undefined {
  if (!header) return undefined;
  const q = new Map<string, number>();
  for (const part of header.toLowerCase().split(',')) {
    const [name, ...params] = part.trim().split(';');
    const qp = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
    const value = qp ? Number(qp.slice(2)) : 1;
    if (name) q.set(name.trim(), Number.isFinite(value) ? value : 0);
  }
  const star = q.get('*');
  for (const coding of ['br', 'gzip', 'deflate'] as const) {
    const v = q.get(coding) ?? star;
    if (v !== undefined && v > 0) return coding;
  }
  return undefined;
}

export function sendJson(res: ServerResponse, status: number, value: unknown): void {
  send(res, {
    status,
    headers: { 'content-type': 'application/json; charset=utf-8' },
    body: Buffer.from(JSON.stringify(value), 'utf8'),
  });
}

/** Reads a request body (bounded) as text. */
export async function readBody(req: IncomingMessage, limit = 1 << 20): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw new RangeError(`request body larger than ${limit} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}
