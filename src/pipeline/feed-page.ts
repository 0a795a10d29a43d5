import { DecodeError } from '../core/errors.js';
import { isNormalizedCollection, type Json, type Representation, type Resource } from '../core/resource.js';
import type { FeedEvent } from './change.js';

/**
 * Turn a decoded feed response into events, checking every field the pipeline relies on. A page
 * with an unusable event fails as a whole (and is retried): skipping the event would lose it.
 */
export function readFeedEvents(page: Representation, url: string): FeedEvent[] {
  if (!isNormalizedCollection(page))
    throw new DecodeError(url, `expected a collection of events, got a "${page.resource_type}"`);
  return page.entries.map((entry, i) => readEvent(entry, `${url} (entry ${i})`));
}

function readEvent(entry: Json, where: string): FeedEvent {
  const fail = (what: string): never => {
    throw new DecodeError(where, what);
  };
  if (!isResource(entry)) return fail(`entry is ${entry === null ? 'null' : typeof entry}, not an event`);
  const e = entry;
  if (typeof e.id !== 'number' || !Number.isSafeInteger(e.id) || e.id < 0)
    fail(`event id is missing or not an integer (${JSON.stringify(e.id)})`);
  if (typeof e.event_type !== 'string' || e.event_type.trim() === '') fail(`event ${e.id} has no event_type`);
  const ts = typeof e.timestamp === 'string' ? new Date(e.timestamp) : undefined;
  if (!ts || Number.isNaN(ts.getTime()))
    fail(`event ${e.id} has no valid timestamp (${JSON.stringify(e.timestamp)})`);
  const changes =
    typeof e.changes === 'string'
      ? e.changes
          .split(',')
          .map((c) => c.trim())
          .filter((c) => c !== '')
      : [];
  return {
    id: e.id as number,
    event_type: (e.event_type as string).trim(),
    timestamp: ts!.toISOString(),
    changes,
    self_link: typeof e.self_link === 'string' ? e.self_link : null,
    subject_link: typeof e.subject_link === 'string' ? e.subject_link : null,
    subject: isResource(e.subject) ? e.subject : undefined,
    source: isResource(e.source) ? e.source : undefined,
  };
}

function isResource(v: unknown): v is Resource {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
