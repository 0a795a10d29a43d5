import { quote } from '../core/bounded-text.js';
import { DecodeError, FeedsyncError, UpstreamRefusedError } from '../core/errors.js';
import { isNormalizedCollection, type Json, type Representation, type Resource } from '../core/resource.js';
import { normalizeDateTime } from '../upstream/datetime.js';
import type { FeedEvent } from './change.js';
import type { PollerDeps } from './poll-context.js';

/**
 * How far ahead of this machine's clock an event's timestamp may be. A timestamp is the service's
 * claim of when the event occurred, and sinks order changes by it (a mirror applies a change only
 * if it is newer than the row's): one from the far future would freeze its subject there. A day
 * covers any zone offset (at most 14 h) of a zone-less timestamp written in local time, which the
 * workflow reading takes as UTC, plus clock drift on either side; anything further is a broken
 * clock or a hostile feed.
 */
export const MAX_FUTURE_SKEW_MS = 24 * 60 * 60 * 1000;
/** The earliest timestamp accepted: the Unix epoch (an earlier one is a default value, not an event). */
export const EARLIEST_TIMESTAMP = '1970-01-01T00:00:00.000Z';
/** Upstream values quoted in an error are cut to this many characters. */

/**
 * Turn a decoded feed response into events, checking every field the pipeline relies on. A page
 * with an unusable event fails as a whole (and is retried): skipping the event would lose it.
 * An event feedsync cannot take as it is (id, timestamp, type) is an UpstreamRefusedError with
 * reason `invalid_event` naming the entry and the value; `now` is this machine's clock (epoch ms).
 */
export function readFeedEvents(page: Representation, url: string, now = Date.now()): FeedEvent[] {
  if (!isNormalizedCollection(page))
    throw new DecodeError(url, `expected a collection of events, got a ${quote(page.resource_type)}`);
  return page.entries.map((entry, i) => readEvent(entry, i, url, now));
}

/**
 * readFeedEvents for the poller and its readers: a refused event is also reported (counted in
 * feedsync_upstream_refusals_total{reason="invalid_event"}).
 */
export function readFeedPage(
  deps: Pick<PollerDeps, 'events' | 'source'>,
  page: Representation,
  url: string,
): FeedEvent[] {
  try {
    return readFeedEvents(page, url);
  } catch (err) {
    if (err instanceof UpstreamRefusedError)
      deps.events.emit('upstream:refused', { source: deps.source.name, reason: err.reason, url: err.url });
    throw err;
  }
}

function readEvent(entry: Json, index: number, url: string, now: number): FeedEvent {
  const fail = (what: string): never => {
    throw new UpstreamRefusedError(url, 'invalid_event', `feed entry ${index}: ${what}`);
  };
  if (!isResource(entry)) return fail(`entry is ${entry === null ? 'null' : typeof entry}, not an event`);
  const e = entry;
  const id = eventId(e.id, fail);
  if (typeof e.event_type !== 'string' || e.event_type.trim() === '')
    fail(`event ${id} has no event_type (${quote(e.event_type)})`);
  // A timestamp without a zone (the workflow spec only says "ISO 8601") is taken as UTC, never
  // as this machine's local time.
  const timestamp =
    typeof e.timestamp === 'string' ? normalizeDateTime(e.timestamp.trim(), 'utc') : undefined;
  if (timestamp === undefined) return fail(`event ${id} has no valid timestamp (${quote(e.timestamp)})`);
  const at = Date.parse(timestamp);
  if (!(at >= 0)) fail(`event ${id} has timestamp ${quote(e.timestamp)}, before ${EARLIEST_TIMESTAMP}`);
  if (at > now + MAX_FUTURE_SKEW_MS)
    fail(
      `event ${id} has timestamp ${quote(e.timestamp)}, more than ${MAX_FUTURE_SKEW_MS / 3_600_000} h ` +
        `ahead of this machine's clock (${new Date(now).toISOString()})`,
    );
  const changes = changeNames(e.changes);
  return {
    id,
    event_type: (e.event_type as string).trim(),
    timestamp,
    changes,
    self_link: typeof e.self_link === 'string' ? e.self_link : null,
    subject_link: typeof e.subject_link === 'string' ? e.subject_link : null,
    subject: isResource(e.subject) ? e.subject : undefined,
    source: isResource(e.source) ? e.source : undefined,
  };
}

/**
 * An event id feedsync can hold exactly: a non-negative integer up to 2^53−1. A JSON number above
 * that is rounded by the parser, but never below 2^53 (rounding keeps order and 2^53−1 is exact),
 * so the check on the parsed value refuses every such id; an XML id typed integer is refused by the
 * decoder already, an untyped one is text and refused here.
 */
function eventId(value: Json | undefined, fail: (what: string) => never): number {
  if (value === undefined || value === null) return fail('event has no id');
  if (typeof value !== 'number') return fail(`event id is not a number: ${quote(value)}`);
  if (!Number.isInteger(value)) return fail(`event id is not an integer: ${quote(value)}`);
  if (value < 0) return fail(`event id is negative: ${quote(value)}`);
  if (!Number.isSafeInteger(value))
    return fail(
      `event id ${quote(value)} is above 2^53−1 (${Number.MAX_SAFE_INTEGER}), the largest id feedsync ` +
        'can hold exactly (a JSON number this large may already have been rounded by parsing)',
    );
  return value;
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
          `(${quote(first.event_type)} at ${first.timestamp}, then ${quote(e.event_type)} at ${e.timestamp}); ` +
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
