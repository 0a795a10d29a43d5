// Writes a resource, held in the specs' JSON conventions, as the specs' XML: the root element named
// after the resource type (hyphenated), typed values with `type`, nulls as nil, links as <link/>,
// embedded expansions inside their link element, collections and lists as `type="array"` elements.
// The syntax the specs leave open (declaration, quotes, CDATA, references, empty arrays, layout)
// follows the dialect's switches.
import { formatWithOffset, styleDatetime } from './datetime-style.js';
import { resolveDialect, type Dialect } from './dialect.js';
import { isCollection, type Json, type Resource } from '../core/resource.js';

export { formatWithOffset } from './datetime-style.js';

export type XmlSyntax = Pick<
  Dialect,
  | 'xmlDeclaration'
  | 'xmlCdata'
  | 'xmlCharRefs'
  | 'xmlQuote'
  | 'xmlAttrOrder'
  | 'xmlEmptyArray'
  | 'xmlIndent'
  | 'datetimes'
>;

export interface XmlWriteOptions {
  /** Rels whose XML name differs from the JSON one, per resource type (scheduling: asset → assets). */
  relAliases?: Record<string, Record<string, string>>;
  /**
   * The real type of a resource embedded under a generic label (`subject`), so that its rel aliases
   * apply; given the embedding resource and the rel.
   */
  embeddedType?: (parent: Resource, rel: string) => string | undefined;
  /**
   * Default: the default dialect's switches (declaration, double quotes, escaped text, self-closed
   * empty arrays, indented).
   */
  syntax?: Partial<XmlSyntax>;
}

/** The default dialect's switches (the writer reads only the XML ones and `datetimes`). */
const DEFAULT_SYNTAX: XmlSyntax = resolveDialect('default');

const DATETIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

export function isDatetimeText(s: string): boolean {
  return DATETIME.test(s) && !Number.isNaN(Date.parse(s));
}

class Writer {
  readonly out: string[] = [];
  readonly s: XmlSyntax;
  constructor(readonly opts: XmlWriteOptions) {
    this.s = { ...DEFAULT_SYNTAX, ...opts.syntax };
  }

  line(depth: number, text: string): void {
    this.out.push(this.s.xmlIndent ? `${'  '.repeat(depth)}${text}\n` : text);
  }

  /** Attributes in the dialect's quotes; `type`/`nil` stay where given, href/rel follow the order switch. */
  attrs(pairs: [string, string][]): string {
    const q = this.s.xmlQuote === 'single' ? "'" : '"';
    const ordered =
      this.s.xmlAttrOrder === 'href-first'
        ? [...pairs].sort((a, b) => attrRank(a[0]) - attrRank(b[0]))
        : pairs;
    return ordered.map(([k, v]) => ` ${k}=${q}${this.attrValue(v)}${q}`).join('');
  }

  attrValue(v: string): string {
    return this.refs(escapeXml(v));
  }

  text(v: string): string {
    if (this.s.xmlCdata && /[&<>]/.test(v)) return `<![CDATA[${v.replace(/]]>/g, ']]]]><![CDATA[>')}]]>`;
    return this.refs(escapeXml(v));
  }

  /** With xmlCharRefs, quotes and every non-ASCII character as numeric character references. */
  refs(escaped: string): string {
    if (!this.s.xmlCharRefs) return escaped;
    return escaped
      .replace(/&quot;/g, '&#34;')
      .replace(/&apos;/g, '&#39;')
      .replace(/[^\p{ASCII}]/gu, (c) => `&#${c.codePointAt(0)};`);
  }

  emptyArray(depth: number, name: string, attrs: [string, string][]): void {
    const a = this.attrs(attrs);
    if (this.s.xmlEmptyArray === 'self-closed') this.line(depth, `<${name}${a}/>`);
    else if (this.s.xmlEmptyArray === 'open-close') this.line(depth, `<${name}${a}></${name}>`);
    else this.line(depth, `<${name}${a}>\n${'  '.repeat(depth)}  \n${'  '.repeat(depth)}</${name}>`);
  }

  datetime(held: string): string {
    if (this.s.datetimes !== 'default') return styleDatetime(held, this.s.datetimes);
    return defaultXmlDatetime(held);
  }
}

function attrRank(name: string): number {
  return name === 'href' ? 0 : name === 'rel' ? 1 : 2;
}

export function toXmlDocument(resource: Resource, opts: XmlWriteOptions = {}): string {
  const w = new Writer(opts);
  if (w.s.xmlDeclaration) {
    const q = w.s.xmlQuote === 'single' ? "'" : '"';
    w.out.push(`<?xml version=${q}1.0${q} encoding=${q}UTF-8${q}?>\n`);
  }
  writeResource(w, resource, resource.resource_type, 0);
  return w.out.join('');
}

function writeResource(w: Writer, res: Resource, realType: string, depth: number): void {
  const name = elementName(res.resource_type);
  if (isCollection(res)) {
    const start = w.out.length;
    for (const entry of res.entries) writeResource(w, entry, entry.resource_type, depth + 1);
    if (res.total_entries !== undefined) {
      w.line(
        depth + 1,
        `<total-entries${w.attrs([['type', 'integer']])}>${res.total_entries}</total-entries>`,
      );
    }
    for (const rel of ['next', 'prev'] as const) {
      const href = res[`${rel}_link`];
      if (typeof href === 'string')
        w.line(
          depth + 1,
          `<link${w.attrs([
            ['rel', rel],
            ['href', href],
          ])}/>`,
        );
    }
    const children = w.out.splice(start);
    if (children.length === 0) return w.emptyArray(depth, name, [['type', 'array']]);
    w.line(depth, `<${name}${w.attrs([['type', 'array']])}>`);
    w.out.push(...children);
    w.line(depth, `</${name}>`);
    return;
  }
  w.line(depth, `<${name}>`);
  const aliases = w.opts.relAliases?.[realType] ?? {};
  for (const [key, value] of Object.entries(res)) {
    if (key === 'resource_type' || value === undefined) continue;
    if (key.endsWith('_link') && typeof value === 'string') {
      const rel = key.slice(0, -'_link'.length);
      const embedded = res[rel];
      const head = `<link${w.attrs([
        ['rel', aliases[rel] ?? rel],
        ['href', value],
      ])}`;
      if (isResource(embedded)) {
        w.line(depth + 1, `${head}>`);
        const type = w.opts.embeddedType?.(res, rel) ?? embedded.resource_type;
        writeResource(w, embedded, type, depth + 2);
        w.line(depth + 1, '</link>');
      } else {
        w.line(depth + 1, `${head}/>`);
      }
      continue;
    }
    if (isResource(value) && typeof res[`${key}_link`] === 'string') continue; // written inside its link
    writeField(w, key, value, depth + 1);
  }
  w.line(depth, `</${name}>`);
}

function writeField(w: Writer, key: string, value: Json, depth: number): void {
  const name = elementName(key);
  if (value === null) {
    w.line(depth, `<${name}${w.attrs([['nil', 'true']])}/>`);
  } else if (typeof value === 'boolean') {
    w.line(depth, `<${name}${w.attrs([['type', 'boolean']])}>${value}</${name}>`);
  } else if (typeof value === 'number') {
    if (!Number.isInteger(value)) throw new TypeError(`xml-writer: field ${key} is not an integer: ${value}`);
    w.line(depth, `<${name}${w.attrs([['type', 'integer']])}>${value}</${name}>`);
  } else if (typeof value === 'string') {
    if (isDatetimeText(value)) {
      w.line(depth, `<${name}${w.attrs([['type', 'datetime']])}>${w.datetime(value)}</${name}>`);
    } else {
      w.line(depth, `<${name}>${w.text(value)}</${name}>`);
    }
  } else if (Array.isArray(value) || isEntriesObject(value)) {
    // A list inside a resource: held as {"entries":[…]} (or a bare array), written like a collection.
    const items = Array.isArray(value) ? value : value.entries;
    if (items.length === 0) return w.emptyArray(depth, name, [['type', 'array']]);
    w.line(depth, `<${name}${w.attrs([['type', 'array']])}>`);
    for (const item of items) {
      if (!isResource(item)) throw new TypeError(`xml-writer: items of ${key} must be resources`);
      writeResource(w, item, item.resource_type, depth + 1);
    }
    w.line(depth, `</${name}>`);
  } else {
    throw new TypeError(`xml-writer: field ${key} holds an object without a link`);
  }
}

/**
 * The default form: datetimes are held normalized (UTC, milliseconds, Z) so that the JSON form
 * equals the normalized form; the XML states the same instant in the shapes real services use (no
 * milliseconds, and on odd minutes a +01:00 offset) so clients must normalize rather than copy.
 */
function defaultXmlDatetime(value: string): string {
  if (!/\.000Z$/.test(value)) return value;
  const ms = Date.parse(value);
  if (new Date(ms).getUTCMinutes() % 2 === 0) return value.replace('.000Z', 'Z');
  return formatWithOffset(ms, 60);
}

export function escapeXml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => XML_ESCAPES[c] as string);
}

const XML_ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&apos;',
};

function elementName(name: string): string {
  return name.replace(/_/g, '-');
}

function isResource(v: unknown): v is Resource {
  return (
    typeof v === 'object' &&
    v !== null &&
    !Array.isArray(v) &&
    typeof (v as Resource).resource_type === 'string'
  );
}

function isEntriesObject(v: unknown): v is { entries: Json[] } {
  return (
    typeof v === 'object' &&
    v !== null &&
    !Array.isArray(v) &&
    Array.isArray((v as { entries?: unknown }).entries)
  );
}
