// Response body → normalized Resource, whatever format was asked for. Every failure is a
// DecodeError naming the URL, so the poller can log it and retry the page, except a body that
// would build too much (too deep, too many values: src/upstream/decode-limits.ts), which is an
// UpstreamRefusedError naming the URL and the limit, checked before the body is parsed.
import { DecodeError, UpstreamRefusedError } from '../core/errors.js';
import type { Json, NormalizedCollection, Representation } from '../core/resource.js';
import { normalizeDateTime } from './datetime.js';
import {
  BUDGET_FLOOR,
  checkJson,
  checkXml,
  JSON_CHARS_PER_CONTAINER,
  jsonContainerBudget,
  MAX_DEPTH,
  MAX_JSON_CONTAINERS,
  MAX_JSON_VALUES,
  MAX_XML_ATTRIBUTES,
  MAX_XML_NODES,
  XML_CHARS_PER_NODE,
  xmlNodeBudget,
  type Excess,
  type XmlVerdict,
} from './decode-limits.js';
import { setField } from './own-field.js';
import { decodeXml, parserMessage, XmlShapeError, type LinkRelMapper } from './xml-decode.js';

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
  const verdict = checkXml(text);
  if (verdict !== undefined) throw xmlRefusal(url, verdict, text.length);
  try {
    return decodeXml(text, linkRel);
  } catch (err) {
    if (err instanceof XmlShapeError) throw new DecodeError(url, err.message);
    // The parser's own guards (nesting depth, entity expansion limits) throw plain Errors.
    throw new DecodeError(url, `XML parser: ${parserMessage(err)}`);
  }
}

/**
 * What the XML pre-scan's verdict becomes: a limit passed or a DOCTYPE is refused (asking again
 * would get the same answer); markup that cannot be read as XML is a decode error, like any
 * malformed body.
 */
function xmlRefusal(url: string, verdict: NonNullable<XmlVerdict>, length: number): Error {
  switch (verdict.kind) {
    case 'limit':
      return refusal(url, 'xml', verdict.excess, length);
    case 'doctype':
      return new UpstreamRefusedError(
        url,
        'doctype',
        `XML body has a DOCTYPE with an external identifier (SYSTEM or PUBLIC) or an internal ` +
          `subset ([…]) at character ${verdict.at}; feedsync accepts only a bare <!DOCTYPE name>, ` +
          `as those declare entities and external resources`,
      );
    case 'malformed':
      return new DecodeError(url, `malformed XML: ${verdict.what} at character ${verdict.at}`);
  }
}

/** The refusal of a body over a limit of decode-limits.ts; the message names the limit. */
function refusal(
  url: string,
  format: 'json' | 'xml',
  excess: NonNullable<Excess>,
  length: number,
): UpstreamRefusedError {
  switch (excess) {
    case 'depth':
      return new UpstreamRefusedError(
        url,
        'too_deep',
        format === 'json'
          ? `JSON nesting is deeper than ${MAX_DEPTH} levels of objects and arrays`
          : `XML nesting is deeper than ${MAX_DEPTH} levels of elements`,
      );
    case 'containers':
      return new UpstreamRefusedError(
        url,
        'too_many_values',
        `JSON body holds more than ${jsonContainerBudget(length)} objects and arrays (the limit for ` +
          `its ${length} characters: ${BUDGET_FLOOR} + 1 per ${JSON_CHARS_PER_CONTAINER} characters, ` +
          `at most ${MAX_JSON_CONTAINERS})`,
      );
    case 'values':
      return new UpstreamRefusedError(
        url,
        'too_many_values',
        `JSON body holds more than ${MAX_JSON_VALUES} keys and values`,
      );
    case 'nodes':
      return new UpstreamRefusedError(
        url,
        'too_many_values',
        `XML body holds more than ${xmlNodeBudget(length)} elements, attributes and other nodes (the ` +
          `limit for its ${length} characters: ${BUDGET_FLOOR} + 1 per ${XML_CHARS_PER_NODE} ` +
          `characters, at most ${MAX_XML_NODES})`,
      );
    case 'attributes':
      return new UpstreamRefusedError(
        url,
        'too_many_values',
        `an XML element has more than ${MAX_XML_ATTRIBUTES} attributes`,
      );
  }
}

/** Thrown by the normaliser past MAX_DEPTH; decodeJson turns it into the refusal. */
class TooDeep extends Error {}

function decodeJson(text: string, url: string): Representation {
  const excess = checkJson(text);
  if (excess !== undefined) throw refusal(url, 'json', excess, text.length);
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
  const collection = Array.isArray(entries);
  if (!collection && (typeof resourceType !== 'string' || resourceType === '')) {
    throw new DecodeError(
      url,
      entries === undefined
        ? 'JSON object with neither a resource_type nor an entries array'
        : `JSON object without a resource_type whose entries is ${typeof entries}, not an array`,
    );
  }
  try {
    return collection
      ? normalizeCollection(value as Record<string, Json>, 1)
      : (normalizeObject(value as Record<string, Json>, 1) as Representation);
  } catch (err) {
    if (err instanceof TooDeep) throw refusal(url, 'json', 'depth', text.length);
    throw new DecodeError(
      url,
      `cannot normalize the JSON: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
}

/**
 * Datetime strings → UTC ms Z; lists → `{ entries }` whether sent as a collection object or as a
 * bare array, so they equal what XML's `type="array"` gives; everything else as parsed. `depth`:
 * the nesting level of `value` if it is an object or array (the body's top-level object is 1);
 * past MAX_DEPTH it throws TooDeep, so the recursion stays shallow whatever the body.
 */
function normalizeJson(value: Json, depth: number): Json {
  if (typeof value === 'string') return normalizeDateTime(value) ?? value;
  if (value === null || typeof value !== 'object') return value;
  if (depth > MAX_DEPTH) throw new TooDeep();
  if (Array.isArray(value)) return { entries: normalizeList(value, depth) };
  if (Array.isArray(value.entries)) return normalizeCollection(value as Record<string, Json>, depth);
  return normalizeObject(value as Record<string, Json>, depth);
}

function normalizeCollection(value: Record<string, Json>, depth: number): NormalizedCollection {
  // An optional label of a collection is dropped: see NormalizedCollection.
  const { resource_type: _label, entries, ...rest } = value;
  // `entries` is the list itself, not a list inside it (one level below the collection).
  if (depth + 1 > MAX_DEPTH) throw new TooDeep();
  return { entries: normalizeList(entries as Json[], depth + 1), ...normalizeObject(rest, depth) };
}

/** In place, like normalizeObject; `depth` is the list's own. */
function normalizeList(list: Json[], depth: number): Json[] {
  for (let i = 0; i < list.length; i++) list[i] = normalizeJson(list[i]!, depth + 1);
  return list;
}

/**
 * Normalizes the freshly parsed object in place: a copy of every object of a page doubled what the
 * decoder allocated (and what the garbage collector then had to go through) for nothing.
 */
function normalizeObject(value: Record<string, Json>, depth: number): { [key: string]: Json | undefined } {
  // for…in over a parsed object sees exactly its own keys (its prototype is Object.prototype,
  // whose properties are not enumerable) without Object.entries' array per object.
  for (const k in value) {
    const v = value[k]!;
    // Numbers, booleans, null and strings that are not date-times stay as they are.
    if (v === null || (typeof v !== 'object' && typeof v !== 'string')) continue;
    const normalized = normalizeJson(v, depth + 1);
    if (normalized === v) continue;
    setField(value, k, normalized);
  }
  return value;
}
