// XML representation → the normalized resource shape (docs/dialects.md). The parser runs in
// preserveOrder mode without trimming or value parsing, so every string reaches us exactly as
// sent (whitespace included) and only the `type` attribute decides what becomes a number,
// boolean, null or datetime.
import { XMLParser, XMLValidator } from 'fast-xml-parser';
import type { Json, NormalizedCollection, Representation, Resource } from '../core/resource.js';
import { normalizeDateTime } from './datetime.js';
import { MAX_DEPTH } from './decode-limits.js';

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

// Built once: the daemon decodes thousands of events per second.
const parser = new XMLParser({
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
  // A backstop: decodeBody refuses deeper bodies before parsing (src/upstream/decode-limits.ts).
  maxNestedTags: MAX_DEPTH,
});

const identity: LinkRelMapper = (_type, rel) => rel;

/** Parse and normalize an XML document. Throws XmlShapeError describing what is wrong. */
export function decodeXml(body: string, linkRel: LinkRelMapper = identity): Representation {
  // Entities a document declares itself are how entity expansion ("billion laughs") and external
  // entities (XXE) attack a parser; neither service declares any, so such a document is refused
  // whole rather than parsed with some of them expanded.
  const doctype = body.indexOf('<!DOCTYPE');
  if (doctype >= 0 && body.indexOf('<!ENTITY', doctype) >= 0)
    throw new XmlShapeError(
      'the DOCTYPE declares entities (<!ENTITY …>); feedsync expands none and refuses the document',
    );
  const valid = XMLValidator.validate(body);
  if (valid !== true) {
    const { msg, line, col } = valid.err;
    throw new XmlShapeError(
      `malformed XML: ${msg}${line ? ` (line ${line}${col ? `, column ${col}` : ''})` : ''}`,
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
    return { tag: key, attrs: (node[ATTRS] as Attrs | undefined) ?? {}, children: node[key] as XNode[] };
  }
  return undefined;
}

function fieldName(tag: string): string {
  return tag.replace(/-/g, '_');
}

/** Child elements of an element that holds structure; non-blank text there is an error. */
function childElements(el: Element): Element[] {
  const out: Element[] = [];
  for (const node of el.children) {
    const child = asElement(node);
    if (child) out.push(child);
    else if (typeof node[TEXT] === 'string' && (node[TEXT] as string).trim() !== '') {
      throw new XmlShapeError(`<${el.tag}> mixes text with child elements`);
    }
  }
  return out;
}

function textOf(el: Element): string {
  let s = '';
  for (const node of el.children) {
    if (typeof node[TEXT] === 'string') s += node[TEXT] as string;
    else if (asElement(node))
      throw new XmlShapeError(`<${el.tag}> has child elements where text was expected`);
  }
  return s;
}

function hasChildElements(el: Element): boolean {
  return el.children.some((n) => asElement(n) !== undefined);
}

/** A top-level or embedded resource: an object with resource_type, or a collection. */
function decodeResource(el: Element, ctx: Ctx): Representation {
  if (el.attrs.type === 'array') return decodeCollection(el, ctx, decodeResource);
  if (el.attrs.nil === 'true') throw new XmlShapeError(`<${el.tag}> is nil where a resource was expected`);
  return decodeObject(el, ctx);
}

function decodeObject(el: Element, ctx: Ctx): Resource {
  const resourceType = fieldName(el.tag);
  const out: Resource = { resource_type: resourceType };
  for (const child of childElements(el)) {
    if (child.tag === 'link') {
      addLink(out, child, resourceType, ctx);
    } else {
      out[fieldName(child.tag)] = decodeValue(child, ctx);
    }
  }
  return out;
}

function addLink(out: Resource | NormalizedCollection, link: Element, ownerType: string, ctx: Ctx): void {
  const { rel, href } = link.attrs;
  if (rel === undefined || rel === '') throw new XmlShapeError(`<link> without rel in <${ownerType}>`);
  if (href === undefined) throw new XmlShapeError(`<link rel="${rel}"> without href in <${ownerType}>`);
  const name = fieldName(ctx.linkRel(ownerType, rel));
  out[`${name}_link`] = href;
  const embedded = childElements(link);
  if (embedded.length > 1) throw new XmlShapeError(`<link rel="${rel}"> embeds several elements`);
  if (embedded.length === 1) out[name] = decodeResource(embedded[0]!, ctx);
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
        throw new XmlShapeError(`<total-entries> of <${el.tag}> is not an integer`);
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
      const n = Number(text);
      if (!/^[+-]?\d+$/.test(text) || !Number.isSafeInteger(n)) {
        throw new XmlShapeError(`<${el.tag}> is typed integer but holds ${JSON.stringify(clip(text))}`);
      }
      return n;
    }
    case 'float': {
      // Not in the specs' type list, but Rails-style serializers emit it for JSON numbers.
      const text = textOf(el).trim();
      const n = Number(text);
      if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text) || !Number.isFinite(n)) {
        throw new XmlShapeError(`<${el.tag}> is typed float but holds ${JSON.stringify(clip(text))}`);
      }
      return n;
    }
    case 'boolean': {
      const text = textOf(el).trim();
      if (text === 'true') return true;
      if (text === 'false') return false;
      throw new XmlShapeError(`<${el.tag}> is typed boolean but holds ${JSON.stringify(clip(text))}`);
    }
    case 'datetime': {
      const text = textOf(el).trim();
      const iso = normalizeDateTime(text);
      if (iso !== undefined) return iso;
      // The workflow spec says only "ISO 8601": a date-time without a zone names no instant, so it
      // is kept as sent, exactly as the same string in JSON is. Anything else is not a datetime.
      if (normalizeDateTime(text, 'utc') !== undefined) return text;
      throw new XmlShapeError(`<${el.tag}> is typed datetime but holds ${JSON.stringify(clip(text))}`);
    }
    default:
      // Untyped (or a type we do not interpret): structure becomes an object, text stays a string.
      if (hasChildElements(el)) return decodeObject(el, ctx);
      return textOf(el);
  }
}

function clip(s: string): string {
  return s.length > 40 ? `${s.slice(0, 40)}…` : s;
}
