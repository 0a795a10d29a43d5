/**
 * One decoded upstream representation, normalized to the JSON conventions of the specs whatever
 * format it came in (docs/change-v1.md): `resource_type`; snake_case names; integers, booleans, nulls and
 * datetimes typed (datetimes as ISO 8601 UTC strings with milliseconds and `Z`); each link as
 * `<rel>_link`; an embedded expansion as `<rel>` beside its `<rel>_link`; a collection as
 * `{ resource_type, entries: [...] }` plus `total_entries`, `next_link`, `prev_link` when given.
 */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json | undefined };

export interface Resource {
  resource_type: string;
  [field: string]: Json | undefined;
}

export interface Collection extends Resource {
  entries: Resource[];
  total_entries?: number;
  next_link?: string;
  prev_link?: string;
}

export function isCollection(r: Resource): r is Collection {
  return Array.isArray((r as { entries?: unknown }).entries);
}
