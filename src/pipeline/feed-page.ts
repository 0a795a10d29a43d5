import { cut, quote } from '../core/bounded-text.js';
import { DecodeError, FeedsyncError } from '../core/errors.js';
import { isNormalizedCollection, type Json, type Representation, type Resource } from '../core/resource.js';
import { normalizeDateTime } from '../upstream/datetime.js';
import type { FeedEvent } from './change.js';
import type { PollerDeps } from './poll-context.js';

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
    fail(`event id is missing or not an integer (${quote(e.id)})`);
  if (typeof e.event_type !== 'string' || e.event_type.trim() === '') fail(`event ${e.id} has no event_type`);
  // A timestamp without a zone (the workflow spec only says "ISO 8601") is taken as UTC, never
  // as this machine's local time.
  const timestamp =
    typeof e.timestamp === 'string' ? normalizeDateTime(e.timestamp.trim(), 'utc') : undefined;
  if (timestamp === undefined) fail(`event ${e.id} has no valid timestamp (${quote(e.timestamp)})`);
  const changes = changeNames(e.changes);
  return {
    id: e.id as number,
    event_type: (e.event_type as string).trim(),
    timestamp: timestamp!,
    changes,
    self_link: typeof e.self_link === 'string' ? e.self_link : null,
    subject_link: typeof e.subject_link === 'string' ? e.subject_link : null,
    subject: isResource(e.subject) ? e.subject : undefined,
    source: isResource(e.source) ? e.source : undefined,
  };
}

/**
 * The spec's comma-separated string, trimmed; absent, null or empty gives []. A list of names
 * (JSON array or XML `type="array"`, decoded as `{ entries }`) is read the same way: not a form the
 * specs show, but dropping the names a server sent would be worse.
 */
function changeNames(value: Json | undefined): string[] {
  const names =
    typeof value === 'string'
      ? value.split(',')
      : isResource(value) && Array.isArray(value.entries)
        ? value.entries.filter((c): c is string => typeof c === 'string')
        : [];
  return names.map((c) => c.trim()).filter((c) => c !== '');
}

function isResource(v: unknown): v is Resource {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * One event per id. The same event listed twice (a page boundary moving under a busy feed) is
 * taken once and counted; two different events under one id cannot both be delivered under their
 * key, so the page is refused (cursor unmoved) rather than one of them dropped.
 */
export function distinctEvents(
  deps: Pick<PollerDeps, 'events' | 'logger' | 'source'>,
  listed: FeedEvent[],
  url: string,
): FeedEvent[] {
  const byId = new Map<number, FeedEvent>();
  const out: FeedEvent[] = [];
  for (const e of listed) {
    const first = byId.get(e.id);
    if (!first) {
      byId.set(e.id, e);
      out.push(e);
      continue;
    }
    if (!sameEvent(first, e)) {
      throw new FeedsyncError(
        `feed page ${url} lists event ${e.id} twice with different contents ` +
          `(${cut(first.event_type)} at ${first.timestamp}, then ${cut(e.event_type)} at ${e.timestamp}); ` +
          'one of them would be lost, so the page is refused and the cursor stays: report it to the service operators',
        true,
      );
    }
    deps.events.emit('feed:anomaly', { source: deps.source.name, kind: 'duplicate_id', eventId: e.id });
    deps.logger.warn({ event_id: e.id, url }, 'feed page lists the same event twice; delivering it once');
  }
  return out;
}

function sameEvent(a: FeedEvent, b: FeedEvent): boolean {
  return (
    a.event_type === b.event_type &&
    a.timestamp === b.timestamp &&
    a.subject_link === b.subject_link &&
    a.changes.join(',') === b.changes.join(',')
  );
}
