// Response body → normalized Resource, whatever format was asked for. Every failure is a
// DecodeError naming the URL, so the poller can log it and retry the page.
import { DecodeError } from '../core/errors.js';
import type { Json, Resource } from '../core/resource.js';
import { normalizeDateTime } from './datetime.js';
import { decodeXml, XmlShapeError, type LinkRelMapper } from './xml-decode.js';

export type { LinkRelMapper } from './xml-decode.js';

export interface DecodeOptions {
  /** Maps an XML link rel to its JSON name (e.g. a scheduling's `assets` → `asset`). */
  linkRel?: LinkRelMapper;
}

const HTML_START = /^<(!doctype\s+html|html[\s>])/i;

export function decodeBody(
  body: string,
  contentType: string | undefined,
  url: string,
  expected: 'json' | 'xml',
  opts: DecodeOptions = {},
): Resource {
  const text = body.charCodeAt(0) === 0xfeff ? body.slice(1) : body;
  const mediaType = contentType?.split(';')[0]?.trim().toLowerCase() || undefined;
  const head = text.trimStart();
  if (mediaType === 'text/html' || mediaType === 'application/xhtml+xml' || HTML_START.test(head)) {
    throw new DecodeError(
      url,
      `got an HTML page (content type ${mediaType ?? 'none'}) instead of ${expected}`,
    );
  }
  if (head === '') throw new DecodeError(url, 'empty body');
  if (mediaType !== undefined && formatOf(mediaType) !== expected) {
    throw new DecodeError(url, `content type ${mediaType} does not match the requested ${expected}`);
  }
  return expected === 'json' ? decodeJson(text, url) : decodeXmlBody(text, url, opts.linkRel);
}

function formatOf(mediaType: string): 'json' | 'xml' | undefined {
  if (mediaType === 'application/json' || mediaType.endsWith('+json')) return 'json';
  if (mediaType === 'application/xml' || mediaType === 'text/xml' || mediaType.endsWith('+xml')) return 'xml';
  return undefined;
}

function decodeXmlBody(text: string, url: string, linkRel: LinkRelMapper | undefined): Resource {
  try {
    return decodeXml(text, linkRel);
  } catch (err) {
    if (err instanceof XmlShapeError) throw new DecodeError(url, err.message);
    // The parser's own guards (nesting depth, entity expansion limits) throw plain Errors.
    throw new DecodeError(url, `XML parser: ${err instanceof Error ? err.message : String(err)}`);
  }
}

function decodeJson(text: string, url: string): Resource {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new DecodeError(url, `malformed JSON: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new DecodeError(
      url,
      `JSON body is ${Array.isArray(value) ? 'an array' : typeof value}, not an object`,
    );
  }
  const resourceType = (value as { resource_type?: unknown }).resource_type;
  if (typeof resourceType !== 'string' || resourceType === '') {
    throw new DecodeError(url, 'JSON object without a resource_type');
  }
  const entries = (value as { entries?: unknown }).entries;
  if (entries !== undefined && !Array.isArray(entries)) {
    throw new DecodeError(url, `entries of the ${resourceType} collection is not an array`);
  }
  return normalizeJson(value as Json) as Resource;
}

/** Datetime strings → UTC ms Z; everything else as parsed. */
function normalizeJson(value: Json | undefined): Json | undefined {
  if (typeof value === 'string') return normalizeDateTime(value) ?? value;
  if (Array.isArray(value)) return value.map((v) => normalizeJson(v) ?? null);
  if (value !== null && typeof value === 'object') {
    const out: { [key: string]: Json | undefined } = {};
    for (const [k, v] of Object.entries(value)) {
      // A plain assignment to "__proto__" would set the prototype instead of a field.
      if (k === '__proto__')
        Object.defineProperty(out, k, {
          value: normalizeJson(v),
          enumerable: true,
          writable: true,
          configurable: true,
        });
      else out[k] = normalizeJson(v);
    }
    return out;
  }
  return value;
}
