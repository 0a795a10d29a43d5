import type { SinkFilter } from '../config/types.js';
import type { Change } from '../core/change.js';

/** An empty list means "any"; each non-empty list must contain the change's value. */
export function passesFilter(filter: SinkFilter, change: Change): boolean {
  const ok = (list: string[], value: string) => list.length === 0 || list.includes(value);
  return (
    ok(filter.sources, change.source) &&
    ok(filter.services, change.service) &&
    ok(filter.event_types, change.event_type) &&
    ok(filter.resource_types, change.resource_type)
  );
}

/** Whether a sink with `filter` can receive anything from a source of `service`. */
export function wantsSource(filter: SinkFilter, source: string, service: string): boolean {
  const ok = (list: string[], value: string) => list.length === 0 || list.includes(value);
  return ok(filter.sources, source) && ok(filter.services, service);
}
