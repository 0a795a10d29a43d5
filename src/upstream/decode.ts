// Response body → normalized Resource, whatever format was asked for. Every failure is a
// DecodeError naming the URL, so the poller can log it and retry the page.
import { DecodeError } from '../core/errors.js';
import type { Json, NormalizedCollection, Representation } from '../core/resource.js';
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
): Representation {
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

function decodeXmlBody(text: string, url: string, linkRel: LinkRelMapper | undefined): Representation {
  try {
    return decodeXml(text, linkRel);
  } catch (err) {
    if (err instanceof XmlShapeError) throw new DecodeError(url, err.message);
    // The parser's own guards (nesting depth, entity expansion limits) throw plain Errors.
    throw new DecodeError(url, `XML parser: ${err instanceof Error ? err.message : String(err)}`);
  }
}

function decodeJson(text: string, url: string): Representation {
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
  const { resource_type: resourceType, entries } = value as { resource_type?: unknown; entries?: unknown };
  // The spec's collection is "an object whose property entries is an array", with no resource_type.
  if (Array.isArray(entries)) return normalizeCollection(value as Record<string, Json>);
  if (typeof resourceType !== 'string' || resourceType === '') {
    throw new DecodeError(
      url,
      entries === undefined
        ? 'JSON object with neither a resource_type nor an entries array'
        : `JSON object without a resource_type whose entries is ${typeof entries}, not an array`,
    );
  }
  return normalizeObject(value as Record<string, Json>) as Representation;
}

/**
 * Datetime strings → UTC ms Z; lists → `{ entries }` whether sent as a collection object or as a
 * bare array, so they equal what XML's `type="array"` gives; everything else as parsed.
 */
function normalizeJson(value: Json): Json {
  if (typeof value === 'string') return normalizeDateTime(value) ?? value;
  if (Array.isArray(value)) return { entries: normalizeList(value) };
  if (value !== null && typeof value === 'object') {
    if (Array.isArray(value.entries)) return normalizeCollection(value as Record<string, Json>);
    return normalizeObject(value as Record<string, Json>);
  }
  return value;
}

function normalizeCollection(value: Record<string, Json>): NormalizedCollection {
  // An optional label of a collection is dropped: see NormalizedCollection.
  const { resource_type: _label, entries, ...rest } = value;
  // `entries` is the list itself, not a list inside it.
  return { entries: normalizeList(entries as Json[]), ...normalizeObject(rest) };
}

/** In place, like normalizeObject. */
function normalizeList(list: Json[]): Json[] {
  for (let i = 0; i < list.length; i++) list[i] = normalizeJson(list[i]!);
  return list;
}

/**
 * Normalizes the freshly parsed object in place: a copy of every object of a page doubled what the
 * decoder allocated (and what the garbage collector then had to go through) for nothing.
 */
function normalizeObject(value: Record<string, Json>): { [key: string]: Json | undefined } {
  // for…in over a parsed object sees exactly its own keys (its prototype is Object.prototype,
  // whose properties are not enumerable) without Object.entries' array per object.
  for (const k in value) {
    const v = value[k]!;
    // Numbers, booleans, null and strings that are not date-times stay as they are.
    if (v === null || (typeof v !== 'object' && typeof v !== 'string')) continue;
    const normalized = normalizeJson(v);
    if (normalized === v) continue;
    // A plain assignment to "__proto__" would set the prototype instead of a field.
    if (k === '__proto__')
      Object.defineProperty(value, k, {
        value: normalized,
        enumerable: true,
        writable: true,
        configurable: true,
      });
    else value[k] = normalized;
  }
  return value;
}
