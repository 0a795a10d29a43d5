// Small helpers for answering over node:http: format negotiation, rendering a resource as JSON or
// XML, and sending a complete response.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { toXmlDocument, type XmlWriteOptions } from './xml-writer.js';
import type { Resource } from '../core/resource.js';

export type Format = 'json' | 'xml';

export const CONTENT_TYPES: Record<Format, string> = {
  json: 'application/json; charset=utf-8',
  xml: 'application/xml; charset=utf-8',
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

export function renderResource(res: Resource, format: Format, xml: XmlWriteOptions): Body {
  const text = format === 'json' ? JSON.stringify(res) : toXmlDocument(res, xml);
  return { status: 200, headers: { 'content-type': CONTENT_TYPES[format] }, body: Buffer.from(text, 'utf8') };
}

export function textBody(status: number, text: string, extra: Record<string, string> = {}): Body {
  const headers = text === '' ? extra : { 'content-type': 'text/plain; charset=utf-8', ...extra };
  return { status, headers, body: Buffer.from(text, 'utf8') };
}

export function send(res: ServerResponse, b: Body): void {
  if (res.destroyed || res.headersSent) return;
  res.writeHead(b.status, { ...b.headers, 'content-length': String(b.body.length) });
  res.end(b.body);
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
