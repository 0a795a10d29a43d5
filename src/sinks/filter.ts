import type { SinkFilter } from '../config/types.js';
import type { Change } from '../core/change.js';

/** An empty list means "any"; a non-empty one must contain the value. */
const ok = (list: string[], value: string): boolean => list.length === 0 || list.includes(value);

/** Takes a change, or what is known of one before its subject is fetched. */
export function passesFilter(
  filter: SinkFilter,
  change: Pick<Change, 'source' | 'service' | 'event_type' | 'resource_type'>,
): boolean {
  return (
    ok(filter.sources, change.source) &&
    ok(filter.services, change.service) &&
    ok(filter.event_types, change.event_type) &&
    ok(filter.resource_types, change.resource_type)
  );
}

/** Whether a sink with `filter` can receive anything from a source of `service`. */
export function wantsSource(filter: SinkFilter, source: string, service: string): boolean {
  return ok(filter.sources, source) && ok(filter.services, service);
}
