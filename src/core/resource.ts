/**
 * One decoded upstream representation, normalized to the JSON conventions of the specs whatever
 * format or dialect it came in (see docs/dialects.md): `resource_type`; snake_case names; integers,
 * booleans, nulls and datetimes typed (datetimes as ISO 8601 UTC strings with milliseconds and `Z`);
 * each link as `<rel>_link`; an embedded expansion as `<rel>` beside its `<rel>_link`; fields and
 * links the spec does not list kept; an absent field absent and a null one null.
 */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json | undefined };

export interface Resource {
  resource_type: string;
  [field: string]: Json | undefined;
}

/**
 * A collection as decoded, at the top of a body or as a field of a resource: `{ entries: [...] }`
 * plus `total_entries`, `next_link`, `prev_link` and other links when given. It carries no
 * `resource_type`: the spec's JSON collections have none and a list inside a resource may arrive as
 * a bare JSON array, so keeping XML's element name (or an optional JSON label) would make the same
 * list normalize differently by format. Entries of a list inside a resource may be plain values.
 */
export interface NormalizedCollection {
  entries: Json[];
  total_entries?: number;
  next_link?: string;
  prev_link?: string;
  [field: string]: Json | undefined;
}

/** A decoded body: a resource or a collection. */
export type Representation = Resource | NormalizedCollection;

export function isNormalizedCollection(r: Representation): r is NormalizedCollection {
  return Array.isArray((r as { entries?: unknown }).entries);
}

/** A labelled collection of resources, as a service builds one before rendering it (the sandbox). */
export interface Collection extends Resource {
  entries: Resource[];
  total_entries?: number;
  next_link?: string;
  prev_link?: string;
}

export function isCollection(r: Resource): r is Collection {
  return Array.isArray((r as { entries?: unknown }).entries);
}
