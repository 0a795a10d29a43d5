// Test-side reading of the sandbox's XML into the specs' JSON conventions, to check that the XML
// and JSON forms of a resource describe the same data. Deliberately independent of src/upstream.
import { XMLParser } from 'fast-xml-parser';

type Node = Record<string, unknown> & { ':@'?: Record<string, string> };
type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

const parser = new XMLParser({
  ignoreAttributes: false,
  attributeNamePrefix: '',
  preserveOrder: true,
  trimValues: false,
  parseTagValue: false,
  parseAttributeValue: false,
});

/** XML document → normalized JSON (datetimes as ISO UTC with milliseconds). */
export function xmlToJson(xml: string, aliases: Record<string, string> = {}): Record<string, Json> {
  const nodes = parser.parse(xml) as Node[];
  const root = nodes.find((n) => !('?xml' in n)) as Node;
  return element(root, aliases) as Record<string, Json>;
}

function tagOf(n: Node): string {
  return Object.keys(n).find((k) => k !== ':@') as string;
}

function children(n: Node): Node[] {
  return (n[tagOf(n)] as Node[]).filter((c) => !('#text' in c));
}

function text(n: Node): string {
  return (n[tagOf(n)] as Node[]).map((c) => String(c['#text'] ?? '')).join('');
}

const under = (s: string) => s.replace(/-/g, '_');

function element(n: Node, aliases: Record<string, string>): Json {
  const attrs = n[':@'] ?? {};
  const tag = tagOf(n);
  if (attrs.type === 'array') {
    const out: Record<string, Json> = { resource_type: under(tag), entries: [] };
    for (const c of children(n)) {
      const t = tagOf(c);
      if (t === 'total-entries') out.total_entries = Number(text(c));
      else if (t === 'link')
        out[`${(c[':@'] as Record<string, string>).rel}_link`] = (c[':@'] as Record<string, string>)
          .href as string;
      else (out.entries as Json[]).push(element(c, aliases));
    }
    return out;
  }
  const out: Record<string, Json> = { resource_type: under(tag) };
  for (const c of children(n)) {
    const t = tagOf(c);
    const a = c[':@'] ?? {};
    if (t === 'link') {
      const rel = aliases[a.rel as string] ?? (a.rel as string);
      out[`${rel}_link`] = a.href as string;
      const inner = children(c);
      if (inner.length > 0) out[rel] = element(inner[0] as Node, aliases);
    } else if (a.nil === 'true') out[under(t)] = null;
    else if (a.type === 'integer') out[under(t)] = Number(text(c));
    else if (a.type === 'boolean') out[under(t)] = text(c) === 'true';
    else if (a.type === 'datetime') out[under(t)] = new Date(text(c)).toISOString();
    else out[under(t)] = text(c);
  }
  return out;
}

/** JSON datetimes (complete ISO with zone) normalized like the contract says. */
export function normalizeJson(value: Json): Json {
  if (typeof value === 'string') {
    return /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.test(value)
      ? new Date(value).toISOString()
      : value;
  }
  if (Array.isArray(value)) return value.map(normalizeJson);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, normalizeJson(v)]));
  }
  return value;
}
