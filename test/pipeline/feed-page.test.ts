// Event-level checks of a feed page: ids feedsync can hold exactly, timestamps within the accepted
// range, refusals that name the entry and a bounded value, reported for the refusal counter; and the
// memory of committed events that tells a re-listing with other contents.
import { describe, expect, it } from 'vitest';
import type { SourceConfig } from '../../src/config/types.js';
import { UpstreamRefusedError } from '../../src/core/errors.js';
import { PipelineEvents } from '../../src/core/events.js';
import type { Json, Representation } from '../../src/core/resource.js';
import type { FeedEvent } from '../../src/pipeline/change.js';
import { MAX_FUTURE_SKEW_MS, readFeedEvents, readFeedPage } from '../../src/pipeline/feed-page.js';
import { RecentIds } from '../../src/pipeline/recent-ids.js';
import { decodeBody } from '../../src/upstream/decode.js';

const URL_ = 'http://127.0.0.1:9/api/events?newer_than=0';
const NOW = Date.parse('2026-11-27T12:00:00.000Z');

const entry = (over: Record<string, Json>): Json => ({
  resource_type: 'event',
  id: 7,
  event_type: 'job_updated',
  timestamp: '2026-11-27T11:00:00Z',
  subject_link: 'http://127.0.0.1:9/api/work_areas/1/jobs/3',
  ...over,
});
const pageOf = (...entries: Json[]): Representation => ({ entries }) as Representation;
const read = (...entries: Json[]) => readFeedEvents(pageOf(...entries), URL_, NOW);

/** The refusal readFeedEvents throws, checked to be an invalid_event refusal naming the URL. */
function refusal(...entries: Json[]): string {
  try {
    read(...entries);
  } catch (err) {
    expect(err).toBeInstanceOf(UpstreamRefusedError);
    expect((err as UpstreamRefusedError).reason).toBe('invalid_event');
    expect((err as Error).message).toContain(`refused GET ${URL_}: feed entry `);
    return (err as Error).message;
  }
  throw new Error('the page was accepted');
}

describe('event ids', () => {
  it('accepts 0 and every integer up to 2^53−1', () => {
    const ids = [0, 1, 2 ** 31 + 5, Number.MAX_SAFE_INTEGER];
    expect(read(...ids.map((id) => entry({ id }))).map((e) => e.id)).toEqual(ids);
  });

  it.each([
    ['above 2^53−1', 2 ** 53, /event id 9007199254740992 is above 2\^53−1 \(9007199254740991\)/],
    ['far above', 1e300, /event id 1e\+300 is above 2\^53−1/],
    ['negative', -1, /event id is negative: -1/],
    ['not an integer', 12.5, /event id is not an integer: 12.5/],
    ['a string', '12', /event id is not a number: "12"/],
    ['an object', { n: 1 }, /event id is not a number: an object/],
    ['absent', null, /event has no id/],
  ])('refuses an id %s, naming the entry and the value', (_what, id, message) => {
    const err = refusal(entry({ id: 1 }), entry({ id: id as Json }));
    expect(err).toMatch(/feed entry 1: /);
    expect(err).toMatch(message);
  });

  it('refuses 9007199254740993 sent in JSON, which parsing rounds to 2^53', () => {
    const body =
      '{"entries":[{"id":9007199254740993,"event_type":"job_updated","timestamp":"2026-11-27T11:00:00Z"}]}';
    const page = decodeBody(body, 'application/json', URL_, 'json');
    expect(() => readFeedEvents(page, URL_, NOW)).toThrow(/event id 9007199254740992 is above 2\^53−1/);
  });

  it('quotes a huge value cut to a bounded length', () => {
    const err = refusal(entry({ id: '9'.repeat(1_000_000) }));
    // The shared cut (core/bounded-text.ts): 300 characters and a note of how many were left out.
    expect(err.length).toBeLessThan(600);
    expect(err).toMatch(/"9{100,}/);
    expect(err).toMatch(/…\[\d+ more characters\]/);
  });
});

describe('event timestamps', () => {
  it('accepts the epoch and anything up to a day ahead of the clock', () => {
    const ahead = new Date(NOW + MAX_FUTURE_SKEW_MS).toISOString();
    const events = read(
      entry({ id: 1, timestamp: '1970-01-01T00:00:00Z' }),
      entry({ id: 2, timestamp: ahead }),
      // zone-less, written in local time at UTC+14 and read as UTC: still within the day
      entry({ id: 3, timestamp: '2026-11-28T01:59:00' }),
    );
    expect(events.map((e) => e.timestamp)).toEqual([
      '1970-01-01T00:00:00.000Z',
      ahead,
      '2026-11-28T01:59:00.000Z',
    ]);
  });

  it.each([
    [
      'before 1970',
      '1969-12-31T23:59:59Z',
      /event 7 has timestamp "1969-12-31T23:59:59Z", before 1970-01-01T00:00:00.000Z/,
    ],
    ['in year 0', '0000-01-01T00:00:00Z', /before 1970/],
    [
      'a day and a second ahead',
      '2026-11-28T12:00:01Z',
      /more than 24 h ahead of this machine's clock \(2026-11-27T12:00:00.000Z\)/,
    ],
    ['in year 9999', '9999-12-31T23:59:59Z', /"9999-12-31T23:59:59Z", more than 24 h ahead/],
    ['past 9999 once its offset is applied', '9999-12-31T23:59:00-14:00', /more than 24 h ahead/],
    ['not a date-time', 'x'.repeat(10_000), /has no valid timestamp \("x{100,}.*…\[\d+ more characters\]/],
  ])('refuses a timestamp %s', (_what, timestamp, message) => {
    const err = refusal(entry({ timestamp }));
    expect(err).toMatch(message);
    expect(err.length).toBeLessThan(600);
  });
});

describe('readFeedPage', () => {
  it('reports a refused event for the refusal counter, then throws it', () => {
    const events = new PipelineEvents();
    const seen: unknown[] = [];
    events.on('upstream:refused', (e) => seen.push(e));
    const deps = { events, source: { name: 'wf' } as SourceConfig };
    expect(() => readFeedPage(deps, pageOf(entry({ id: -3 })), URL_)).toThrow(/event id is negative: -3/);
    expect(seen).toEqual([{ source: 'wf', reason: 'invalid_event', url: URL_ }]);
    expect(
      readFeedPage(deps, pageOf(entry({ id: 3, timestamp: new Date().toISOString() })), URL_),
    ).toHaveLength(1);
    expect(seen).toHaveLength(1);
  });
});

describe('RecentIds: a re-listing with other contents', () => {
  const ev = (over: Partial<FeedEvent> = {}): FeedEvent => ({
    id: 5,
    event_type: 'job_updated',
    timestamp: '2026-11-27T11:00:00.000Z',
    changes: ['name'],
    self_link: null,
    subject_link: 'http://u/api/work_areas/1/jobs/3',
    ...over,
  });

  it('says nothing for the same contents, or for an id it never committed', () => {
    const recent = new RecentIds();
    recent.add(ev());
    expect(recent.changed(ev())).toBeUndefined();
    expect(recent.changed(ev({ id: 6, event_type: 'job_deleted' }))).toBeUndefined();
  });

  it('names each field that differs, old and new, once per id and contents', () => {
    const recent = new RecentIds();
    recent.add(ev());
    const other = ev({ event_type: 'job_deleted', subject_link: 'http://u/api/work_areas/1/jobs/4' });
    expect(recent.changed(other)).toEqual([
      'event_type: "job_updated" → "job_deleted"',
      'subject_link: "http://u/api/work_areas/1/jobs/3" → "http://u/api/work_areas/1/jobs/4"',
    ]);
    expect(recent.changed(other), 'the same re-listing again').toBeUndefined();
    expect(recent.changed(ev({ changes: ['name', 'status'] }))).toEqual(['changes: "name" → "name,status"']);
  });

  it('compares with an event still being committed', () => {
    const recent = new RecentIds();
    expect(recent.changed(ev({ event_type: 'job_deleted' }), ev())).toEqual([
      'event_type: "job_updated" → "job_deleted"',
    ]);
  });

  it('cuts what it keeps and shows; tells a difference past the cut', () => {
    const recent = new RecentIds();
    const long = `http://u/${'a'.repeat(10_000)}`;
    recent.add(ev({ subject_link: `${long}1` }));
    expect(recent.changed(ev({ subject_link: `${long}2` }))).toEqual([
      'contents past their first 120 characters',
    ]);
    const [line] = recent.changed(ev({ subject_link: 'http://u/b' }))!;
    expect(line!.length).toBeLessThan(300);
  });

  it('still tells a change once the contents are no longer kept in detail', () => {
    const recent = new RecentIds();
    for (let id = 1; id <= 1_001; id++) recent.add(ev({ id }));
    expect(recent.changed(ev({ id: 1, event_type: 'job_deleted' }))).toEqual([
      'contents (the first listing is no longer kept in detail)',
    ]);
    expect(recent.changed(ev({ id: 2, event_type: 'job_deleted' }))).toHaveLength(1);
    expect(recent.has(1)).toBe(true);
  });

  it('forgets the oldest ids first, past its capacity, and keeps detail for the newest only', () => {
    const recent = new RecentIds(1_500);
    for (let id = 1; id <= 4_000; id++) recent.add(ev({ id }));
    expect(recent.total).toBe(4_000);
    expect(recent.forgotten).toBe(2_500);
    expect(recent.has(2_500)).toBe(false);
    expect(recent.has(2_501)).toBe(true);
    expect(recent.has(4_000)).toBe(true);
    expect(recent.changed(ev({ id: 2_600, event_type: 'job_deleted' }))).toEqual([
      'contents (the first listing is no longer kept in detail)',
    ]);
    expect(recent.changed(ev({ id: 3_001, event_type: 'job_deleted' }))).toEqual([
      'event_type: "job_updated" → "job_deleted"',
    ]);
    // Below the detail's size the capacity bounds both.
    const small = new RecentIds(3);
    for (let id = 1; id <= 10; id++) small.add(ev({ id }));
    expect([7, 8, 9, 10].map((id) => small.has(id))).toEqual([false, true, true, true]);
    expect(small.changed(ev({ id: 8, event_type: 'job_deleted' }))).toHaveLength(1);
  });
});
