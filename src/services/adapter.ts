import type { SourceConfig } from '../config/types.js';
import type { ServiceKind } from '../core/change.js';
import type { Resource } from '../core/resource.js';

/**
 * Everything that differs between the two upstream services, in one small interface. The poller,
 * expansion and change code are generic and only ask the adapter.
 */
export interface ServiceAdapter {
  kind: ServiceKind;
  /** Event types the spec lists; others still become changes, but are logged once. */
  knownEventTypes: ReadonlySet<string>;
  /** Extra query parameters of the feed request (e.g. expand). */
  feedParams(source: SourceConfig): Record<string, string>;
  /** Most places the feed lists an event away from its id order (see pipeline/cursor.ts). */
  maxDisorder: number;
  /** Map an XML link rel to its JSON name (the specs name a few differences). */
  linkRel(resourceType: string, rel: string): string;
  /** Final touch on a subject once its resource_type is known (embedded subjects arrive generic). */
  normalizeSubject(subject: Resource): Resource;
}

export function eventTypes(table: [string[], string[]][]): Set<string> {
  const set = new Set<string>();
  for (const [resources, operations] of table)
    for (const r of resources) for (const op of operations) set.add(`${r}_${op}`);
  return set;
}
