// A held resource (the specs' JSON conventions, datetimes normalized, lists as {"entries":[…]}) as a
// dialect presents it: first what it says (fields the specs do not list, nulls left out), which is
// also what a client must end up with; then how it is written in JSON (collection labels, bare or
// wrapped lists, datetime style, byte-order mark).
import { styleDatetime } from './datetime-style.js';
import type { Dialect } from './dialect.js';
import { isDatetimeText } from './xml-writer.js';
import type { Json, Resource } from '../core/resource.js';

/**
 * The resource with the dialect's content choices applied: with `extras`, every resource that has a
 * self link gains `revision` and a `history_link` (unknown to the specs); with `nulls: absent`,
 * fields without a value are left out. A client reading either format must produce exactly this.
 */
export function present<T extends Resource>(res: T, d: Pick<Dialect, 'extras' | 'nulls'>): T {
  if (!d.extras && d.nulls === 'null') return res;
  return mapResource(res, d) as T;
}

function mapResource(res: Resource, d: Pick<Dialect, 'extras' | 'nulls'>): Resource {
  const out: Resource = { resource_type: res.resource_type };
  for (const [key, value] of Object.entries(res)) {
    if (key === 'resource_type' || value === undefined) continue;
    if (value === null && d.nulls === 'absent' && !key.endsWith('_link')) continue;
    out[key] = mapValue(value, d);
  }
  if (d.extras && typeof res.self_link === 'string') {
    out.revision = revisionOf(res.self_link);
    out.history_link = `${res.self_link}/history`;
  }
  return out;
}

function mapValue(value: Json, d: Pick<Dialect, 'extras' | 'nulls'>): Json {
  if (Array.isArray(value)) return value.map((v) => mapValue(v, d));
  if (typeof value === 'object' && value !== null) {
    if (typeof value.resource_type === 'string') return mapResource(value as Resource, d);
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [k, v === undefined ? v : mapValue(v, d)]),
    );
  }
  return value;
}

/** Stable per resource, so a feed's embedded copy and a GET agree. */
function revisionOf(selfLink: string): number {
  let h = 7;
  for (const ch of selfLink) h = (h * 31 + (ch.codePointAt(0) as number)) % 9973;
  return h + 1;
}

/** The JSON text of an already presented resource, written in the dialect's syntax. */
export function toJsonText(res: Resource, d: Dialect): string {
  const top = d.collectionType || !Array.isArray(res.entries) ? res : withoutType(res);
  const text = JSON.stringify(top, (key, value: unknown) => writeValue(key, value, d));
  return d.jsonBom ? `\uFEFF${text}` : text;
}

function withoutType(res: Resource): Record<string, unknown> {
  const { resource_type: _dropped, ...rest } = res;
  return rest;
}

function writeValue(key: string, value: unknown, d: Dialect): unknown {
  if (typeof value === 'string' && d.datetimes !== 'default' && isDatetimeText(value)) {
    return styleDatetime(value, d.datetimes);
  }
  // A list inside a resource (not the top-level collection, whose key is ''): bare when asked.
  if (
    key !== '' &&
    d.nestedLists === 'array' &&
    typeof value === 'object' &&
    value !== null &&
    !Array.isArray(value) &&
    Array.isArray((value as { entries?: unknown }).entries) &&
    !('resource_type' in value)
  ) {
    return (value as { entries: unknown[] }).entries;
  }
  return value;
}
