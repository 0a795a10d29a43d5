// XML representation → the normalized resource shape (docs/dialects.md). The parser runs in
// preserveOrder mode without trimming or value parsing, so every string reaches us exactly as
// sent (whitespace included) and only the `type` attribute decides what becomes a number,
// boolean, null or datetime.
import { cut } from '../core/bounded-text.js';
import { XMLParser, XMLValidator, type X2jOptions } from 'fast-xml-parser';
import type { Json, NormalizedCollection, Representation, Resource } from '../core/resource.js';
import { normalizeDateTime } from './datetime.js';
import { MAX_DEPTH } from './decode-limits.js';
import { setField } from './own-field.js';

export type LinkRelMapper = (resourceType: string, xmlRel: string) => string;

/** Thrown inside the XML walk; decodeBody turns it into a DecodeError naming the URL. */
export class XmlShapeError extends Error {
  override name = 'XmlShapeError';
}

type Attrs = Record<string, string>;
/** preserveOrder node: `{ tag: children, ':@': attrs }` or `{ '#text': text }`. */
type XNode = { [key: string]: XNode[] | Attrs | string | undefined; ':@'?: Attrs };

interface Element {
  tag: string;
  attrs: Attrs;
  children: XNode[];
}

const ATTRS = ':@';
const TEXT = '#text';

/**
 * fast-xml-parser refuses elements and attributes named `__proto__`, `constructor` or `prototype`
 * (an Error that would fail the page forever) and renames `toString`, `valueOf` and the like to
 * `__toString`…, so the same field would differ between XML and JSON. Every name Object.prototype
 * holds is passed through it as `#name` instead (no XML name starts with `#`) and read back by
 * asElement; setField then makes it an own field, as the JSON path does.
 */
const PROTOTYPE_NAMES = new Set([...Object.getOwnPropertyNames(Object.prototype), 'prototype']);
const ESCAPE = '#';
const escapeName = (name: string): string => (PROTOTYPE_NAMES.has(name) ? ESCAPE + name : name);
const unescapeName = (name: string): string =>
  name.charCodeAt(0) === 0x23 /* # */ ? name.slice(ESCAPE.length) : name;

/** How decodeXml parses (exported for the tests that measure what the parser builds). */
export const XML_PARSER_OPTIONS = {
  preserveOrder: true,
  ignoreAttributes: false,
  attributeNamePrefix: '',
  parseTagValue: false,
  parseAttributeValue: false,
  trimValues: false,
  processEntities: true,
  // Needed for numeric character references (&#233; &#x263A;); also decodes common HTML names.
  htmlEntities: true,
  ignoreDeclaration: true,
  ignorePiTags: true,
  transformTagName: escapeName,
  transformAttributeName: escapeName,
  // A backstop: decodeBody refuses deeper bodies before parsing (src/upstream/decode-limits.ts).
  maxNestedTags: MAX_DEPTH,
} as const satisfies X2jOptions;

// Built once: the daemon decodes thousands of events per second.
const parser = new XMLParser(XML_PARSER_OPTIONS);

const identity: LinkRelMapper = (_type, rel) => rel;

/**
 * Parse and normalize an XML document. Throws XmlShapeError describing what is wrong. Only for a
 * body checkXml (decode-limits.ts) let through: that scan bounds what the parser builds and
 * refuses DOCTYPEs that declare anything, entities included (decodeBody runs it).
 */
export function decodeXml(body: string, linkRel: LinkRelMapper = identity): Representation {
  const valid = XMLValidator.validate(body);
  if (valid !== true) {
    const { msg, line, col } = valid.err;
    throw new XmlShapeError(
      `malformed XML: ${cut(msg, MESSAGE_CHARS)}${line ? ` (line ${line}${col ? `, column ${col}` : ''})` : ''}`,
    );
  }
  const nodes = parser.parse(body) as XNode[];
  const roots = nodes.map(asElement).filter((e): e is Element => e !== undefined);
  if (roots.length !== 1) {
    throw new XmlShapeError(
      roots.length === 0 ? 'the XML root is not an element' : 'several XML root elements',
    );
  }
  const root = roots[0]!;
  const strayText = nodes.some((n) => typeof n[TEXT] === 'string' && (n[TEXT] as string).trim() !== '');
  if (strayText) throw new XmlShapeError('text outside the XML root element');
  return decodeResource(root, { linkRel });
}

interface Ctx {
  linkRel: LinkRelMapper;
}

function asElement(node: XNode): Element | undefined {
  for (const key of Object.keys(node)) {
    if (key === ATTRS || key === TEXT) continue;
    return {
      tag: unescapeName(key),
      attrs: (node[ATTRS] as Attrs | undefined) ?? {},
      children: node[key] as XNode[],
    };
  }
  return undefined;
}

function fieldName(tag: string): string {
  return tag.replaceAll('-', '_');
}

/** An element's name for a message: upstream text, cut. */
function named(tag: string): string {
  return `<${cut(tag, 40)}>`;
}

/** Child elements of an element that holds structure; non-blank text there is an error. */
function childElements(el: Element): Element[] {
  const out: Element[] = [];
  for (const node of el.children) {
    const child = asElement(node);
    if (child) out.push(child);
    else if (typeof node[TEXT] === 'string' && (node[TEXT] as string).trim() !== '') {
      throw new XmlShapeError(`${named(el.tag)} mixes text with child elements`);
    }
  }
  return out;
}

function textOf(el: Element): string {
  let s = '';
  for (const node of el.children) {
    if (typeof node[TEXT] === 'string') s += node[TEXT] as string;
    else if (asElement(node))
      throw new XmlShapeError(`${named(el.tag)} has child elements where text was expected`);
  }
  return s;
}

function hasChildElements(el: Element): boolean {
  return el.children.some((n) => asElement(n) !== undefined);
}

/** A top-level or embedded resource: an object with resource_type, or a collection. */
function decodeResource(el: Element, ctx: Ctx): Representation {
  if (el.attrs.type === 'array') return decodeCollection(el, ctx, decodeResource);
  if (el.attrs.nil === 'true')
    throw new XmlShapeError(`${named(el.tag)} is nil where a resource was expected`);
  return decodeObject(el, ctx);
}

function decodeObject(el: Element, ctx: Ctx): Resource {
  const resourceType = fieldName(el.tag);
  const out: Resource = { resource_type: resourceType };
  for (const child of childElements(el)) {
    if (child.tag === 'link') {
      addLink(out, child, resourceType, ctx);
    } else {
      setField(out, fieldName(child.tag), decodeValue(child, ctx));
    }
  }
  return out;
}

function addLink(out: Resource | NormalizedCollection, link: Element, ownerType: string, ctx: Ctx): void {
  const { rel, href } = link.attrs;
  if (rel === undefined || rel === '') throw new XmlShapeError(`<link> without rel in ${named(ownerType)}`);
  if (href === undefined)
    throw new XmlShapeError(`<link rel=${quoted(rel)}> without href in ${named(ownerType)}`);
  const name = fieldName(ctx.linkRel(ownerType, rel));
  setField(out, `${name}_link`, href);
  const embedded = childElements(link);
  if (embedded.length > 1) throw new XmlShapeError(`<link rel=${quoted(rel)}> embeds several elements`);
  if (embedded.length === 1) setField(out, name, decodeResource(embedded[0]!, ctx));
}

/**
 * A `type="array"` element, at the top of a body or inside a resource: `{ entries }` plus the
 * pagination fields and links. Its element name is dropped (see NormalizedCollection). Entries of a body's
 * collection are resources; entries of a list inside a resource are values (`<tag>hd</tag>` is a
 * string there, as `["hd"]` is in JSON).
 */
function decodeCollection(
  el: Element,
  ctx: Ctx,
  item: (el: Element, ctx: Ctx) => Json,
): NormalizedCollection {
  const entries: Json[] = [];
  const out: NormalizedCollection = { entries };
  for (const child of childElements(el)) {
    if (child.tag === 'total-entries') {
      const total = decodeValue(child, ctx);
      if (typeof total !== 'number')
        throw new XmlShapeError(`<total-entries> of ${named(el.tag)} is not an integer`);
      out.total_entries = total;
    } else if (child.tag === 'link') {
      addLink(out, child, fieldName(el.tag), ctx);
    } else {
      entries.push(item(child, ctx));
    }
  }
  return out;
}

/** A field's value, as its `type` attribute says. */
function decodeValue(el: Element, ctx: Ctx): Json {
  if (el.attrs.nil === 'true') return null;
  const type = el.attrs.type;
  switch (type) {
    case 'array':
      return decodeCollection(el, ctx, decodeValue);
    case 'integer': {
      const text = textOf(el).trim();
      const n = isInteger(text) ? Number(text) : NaN;
      if (!Number.isSafeInteger(n)) throw typeMismatch(el, type, text);
      return n;
    }
    case 'float': {
      // Not in the specs' type list, but Rails-style serializers emit it for JSON numbers.
      const text = textOf(el).trim();
      const n = isDecimal(text) ? Number(text) : NaN;
      if (!Number.isFinite(n)) throw typeMismatch(el, type, text);
      return n;
    }
    case 'boolean': {
      const text = textOf(el).trim();
      if (text === 'true') return true;
      if (text === 'false') return false;
      throw typeMismatch(el, type, text);
    }
    case 'datetime': {
      const text = textOf(el).trim();
      const iso = normalizeDateTime(text);
      if (iso !== undefined) return iso;
      // The workflow spec says only "ISO 8601": a date-time without a zone names no instant, so it
      // is kept as sent, exactly as the same string in JSON is. Anything else is not a datetime.
      if (normalizeDateTime(text, 'utc') !== undefined) return text;
      throw typeMismatch(el, type, text);
    }
    default:
      // Untyped (or a type we do not interpret): structure becomes an object, text stays a string.
      if (hasChildElements(el)) return decodeObject(el, ctx);
      return textOf(el);
  }
}

function typeMismatch(el: Element, type: string, text: string): XmlShapeError {
  return new XmlShapeError(`${named(el.tag)} is typed ${type} but holds ${quoted(text)}`);
}

/**
 * The longest text read as a typed integer or float. A safe integer has at most 16 digits and a
 * double needs at most 17 significant digits and a 3-digit exponent; anything longer is not a
 * number a service meant, and refusing it keeps every such check short.
 */
export const MAX_INTEGER_CHARS = 32;
export const MAX_FLOAT_CHARS = 64;

const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;

/** Index of the first non-digit at or after `i`. */
function digitsFrom(s: string, i: number): number {
  while (isDigit(s.charCodeAt(i))) i++;
  return i;
}

/** XML Schema's integer: `[+-]?[0-9]+`, at most MAX_INTEGER_CHARS long. */
function isInteger(s: string): boolean {
  if (s.length > MAX_INTEGER_CHARS) return false;
  const start = s.charCodeAt(0) === 0x2b /* + */ || s.charCodeAt(0) === 0x2d /* - */ ? 1 : 0;
  const end = digitsFrom(s, start);
  return end > start && end === s.length;
}

/**
 * XML Schema's double without INF and NaN (a superset of JSON's number):
 * `[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?`, at most MAX_FLOAT_CHARS long. Scanned
 * rather than matched: the pattern backtracks over long digit runs.
 */
function isDecimal(s: string): boolean {
  if (s.length > MAX_FLOAT_CHARS) return false;
  let i = s.charCodeAt(0) === 0x2b || s.charCodeAt(0) === 0x2d ? 1 : 0;
  const whole = digitsFrom(s, i);
  let digits = whole - i;
  i = whole;
  if (s.charCodeAt(i) === 0x2e /* . */) {
    const fraction = digitsFrom(s, i + 1);
    digits += fraction - i - 1;
    i = fraction;
  }
  if (digits === 0) return false;
  if (s.charCodeAt(i) === 0x65 /* e */ || s.charCodeAt(i) === 0x45 /* E */) {
    i++;
    if (s.charCodeAt(i) === 0x2b || s.charCodeAt(i) === 0x2d) i++;
    const exponent = digitsFrom(s, i);
    if (exponent === i) return false;
    i = exponent;
  }
  return i === s.length;
}

/** Upstream text for a message: cut, and quoted so that nothing in it passes for our own words. */
function quoted(s: string): string {
  return JSON.stringify(cut(s, 40));
}

/**
 * The parser's own messages quote names and text from the body: cut to this length, as every
 * upstream text in a message is.
 */
export const MESSAGE_CHARS = 200;

/** A message of the parser's, cut (see MESSAGE_CHARS). */
export function parserMessage(err: unknown): string {
  return cut(err instanceof Error ? err.message : String(err), MESSAGE_CHARS);
}
