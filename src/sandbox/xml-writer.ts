// Writes a resource, held in the specs' JSON conventions, as the specs' XML: the root element named
// after the resource type (hyphenated), typed values with `type`, nulls as nil, links as <link/>,
// embedded expansions inside their link element, collections as `type="array"` elements.
import { isCollection, type Json, type Resource } from '../core/resource.js';

export interface XmlWriteOptions {
  /** Rels whose XML name differs from the JSON one, per resource type (scheduling: asset → assets). */
  relAliases?: Record<string, Record<string, string>>;
  /**
   * The real type of a resource embedded under a generic label (`subject`), so that its rel aliases
   * apply; given the embedding resource and the rel.
   */
  embeddedType?: (parent: Resource, rel: string) => string | undefined;
}

const DATETIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

export function isDatetimeText(s: string): boolean {
  return DATETIME.test(s) && !Number.isNaN(Date.parse(s));
}

export function toXmlDocument(resource: Resource, opts: XmlWriteOptions = {}): string {
  const out: string[] = ['<?xml version="1.0" encoding="UTF-8"?>\n'];
  writeResource(out, resource, resource.resource_type, 0, opts);
  return out.join('');
}

function writeResource(out: string[], res: Resource, realType: string, depth: number, opts: XmlWriteOptions) {
  const pad = '  '.repeat(depth);
  const name = elementName(res.resource_type);
  if (isCollection(res)) {
    const children: string[] = [];
    for (const entry of res.entries) writeResource(children, entry, entry.resource_type, depth + 1, opts);
    if (res.total_entries !== undefined) {
      children.push(`${pad}  <total-entries type="integer">${res.total_entries}</total-entries>\n`);
    }
    for (const rel of ['next', 'prev'] as const) {
      const href = res[`${rel}_link`];
      if (typeof href === 'string') children.push(`${pad}  <link rel="${rel}" href="${escapeXml(href)}"/>\n`);
    }
    out.push(children.length === 0 ? `${pad}<${name} type="array"/>\n` : `${pad}<${name} type="array">\n`);
    if (children.length > 0) out.push(...children, `${pad}</${name}>\n`);
    return;
  }
  out.push(`${pad}<${name}>\n`);
  const aliases = opts.relAliases?.[realType] ?? {};
  for (const [key, value] of Object.entries(res)) {
    if (key === 'resource_type' || value === undefined) continue;
    if (key.endsWith('_link') && typeof value === 'string') {
      const rel = key.slice(0, -'_link'.length);
      const xmlRel = aliases[rel] ?? rel;
      const embedded = res[rel];
      const head = `${pad}  <link rel="${escapeXml(xmlRel)}" href="${escapeXml(value)}"`;
      if (isResource(embedded)) {
        out.push(`${head}>\n`);
        const type = opts.embeddedType?.(res, rel) ?? embedded.resource_type;
        writeResource(out, embedded, type, depth + 2, opts);
        out.push(`${pad}  </link>\n`);
      } else {
        out.push(`${head}/>\n`);
      }
      continue;
    }
    if (isResource(value) && typeof res[`${key}_link`] === 'string') continue; // written inside its link
    writeField(out, key, value, depth + 1, opts);
  }
  out.push(`${pad}</${name}>\n`);
}

function writeField(out: string[], key: string, value: Json, depth: number, opts: XmlWriteOptions): void {
  const pad = '  '.repeat(depth);
  const name = elementName(key);
  if (value === null) {
    out.push(`${pad}<${name} nil="true"/>\n`);
  } else if (typeof value === 'boolean') {
    out.push(`${pad}<${name} type="boolean">${value}</${name}>\n`);
  } else if (typeof value === 'number') {
    if (!Number.isInteger(value)) throw new TypeError(`xml-writer: field ${key} is not an integer: ${value}`);
    out.push(`${pad}<${name} type="integer">${value}</${name}>\n`);
  } else if (typeof value === 'string') {
    const typed = isDatetimeText(value);
    const text = typed ? xmlDatetime(value) : escapeXml(value);
    out.push(`${pad}<${name}${typed ? ' type="datetime"' : ''}>${text}</${name}>\n`);
  } else if (Array.isArray(value)) {
    if (value.length === 0) {
      out.push(`${pad}<${name} type="array"/>\n`);
      return;
    }
    out.push(`${pad}<${name} type="array">\n`);
    for (const item of value) {
      if (!isResource(item)) throw new TypeError(`xml-writer: items of ${key} must be resources`);
      writeResource(out, item, item.resource_type, depth + 1, opts);
    }
    out.push(`${pad}</${name}>\n`);
  } else {
    throw new TypeError(`xml-writer: field ${key} holds an object without a link`);
  }
}

/**
 * Datetimes are held normalized (UTC, milliseconds, Z) so that the JSON form equals the normalized
 * form; the XML form states the same instant in the shapes real services use (no milliseconds, and
 * on odd minutes a +01:00 offset) so clients must normalize rather than copy.
 */
function xmlDatetime(value: string): string {
  if (!/\.000Z$/.test(value)) return value;
  const ms = Date.parse(value);
  if (new Date(ms).getUTCMinutes() % 2 === 0) return value.replace('.000Z', 'Z');
  return formatWithOffset(ms, 60);
}

/** ISO 8601 of an instant at a fixed offset from UTC, milliseconds only when not zero. */
export function formatWithOffset(ms: number, offsetMinutes: number): string {
  const local = new Date(ms + offsetMinutes * 60_000).toISOString();
  const base = local.endsWith('.000Z') ? local.slice(0, -5) : local.slice(0, -1);
  if (offsetMinutes === 0) return `${base}Z`;
  const sign = offsetMinutes < 0 ? '-' : '+';
  const abs = Math.abs(offsetMinutes);
  const hh = String(Math.floor(abs / 60)).padStart(2, '0');
  const mm = String(abs % 60).padStart(2, '0');
  return `${base}${sign}${hh}:${mm}`;
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
