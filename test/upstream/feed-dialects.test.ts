// Feed forms a spec-following server may use (F2, F3, F5, and zone-less timestamps), from a
// hand-written body through the decoder, the page reader and the change, to the stored cursor.
import { join } from 'node:path';
import { rmSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import type { Representation } from '../../src/core/resource.js';
import { buildChange } from '../../src/pipeline/change.js';
import { feedUrl } from '../../src/pipeline/poller.js';
import { readFeedEvents } from '../../src/pipeline/feed-page.js';
import { services } from '../../src/services/index.js';
import { CursorStore } from '../../src/store/cursors.js';
import { openStore } from '../../src/store/store.js';
import { decodeBody } from '../../src/upstream/decode.js';
import { tempDir } from '../support/harness.js';
import type { SourceConfig } from '../../src/config/types.js';

const URL_ = 'http://127.0.0.1:9/workflow/api/events';
const B = 'http://127.0.0.1:9/workflow/api';

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

function page(format: 'json' | 'xml', body: string): Representation {
  return decodeBody(body, `application/${format}`, URL_, format);
}

/** One event in each format; `changes` is the raw JSON member / XML element, or absent. */
function event(id: string, type: string, changes?: { json: string; xml: string }) {
  return {
    json: `{"resource_type":"event","id":${id},"event_type":"${type}","timestamp":"2026-11-20T10:15:02Z",${
      changes ? `"changes":${changes.json},` : ''
    }"self_link":"${B}/events/${id}","subject_link":"${B}/jobs/10"}`,
    xml: `<event><id type="integer">${id}</id><event-type>${type}</event-type><timestamp type="datetime">2026-11-20T10:15:02Z</timestamp>${
      changes ? changes.xml : ''
    }<link rel="self" href="${B}/events/${id}"/><link rel="subject" href="${B}/jobs/10"/></event>`,
  };
}

function bothFormats(events: { json: string; xml: string }[]) {
  const fromJson = readFeedEvents(page('json', `{"entries":[${events.map((e) => e.json).join(',')}]}`), URL_);
  const fromXml = readFeedEvents(
    page('xml', `<events type="array">${events.map((e) => e.xml).join('')}</events>`),
    URL_,
  );
  expect(fromXml).toStrictEqual(fromJson);
  return fromJson;
}

describe('F2: event ids with gaps and above 2^31', () => {
  const ids = [2 ** 31 - 1, 2 ** 31 + 5, 4_294_967_296 + 7, 2 ** 53 - 1];

  it('are read exactly, in both formats', () => {
    const events = bothFormats(ids.map((id) => event(String(id), 'job_updated')));
    expect(events.map((e) => e.id)).toEqual(ids);
  });

  it('are stored in and read back from the cursor store exactly, and sent back exactly', () => {
    const dir = tempDir();
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const db = openStore(join(dir, 'feedsync.db'));
    cleanups.push(() => db.close());
    const cursors = new CursorStore(db);
    for (const id of ids) {
      // seen_above: ids above the cursor already queued (the workflow feed lists out of id order).
      const seenAbove = [id + 2, id + 9].filter((n) => Number.isSafeInteger(n));
      cursors.save('wf', id, seenAbove);
      expect(cursors.get('wf')).toEqual({ eventId: id, seenAbove });
      const url = feedUrl({ base_url: B.slice(0, -4) } as SourceConfig, services.workflow, id, []);
      expect(new URL(url).searchParams.get('newer_than')).toBe(String(id));
    }
  });

  it('an id beyond 2^53 cannot be held exactly: the page fails rather than lose or merge events', () => {
    const e = event('9007199254740993', 'job_updated');
    // JSON.parse rounds it to 2^53, still above 2^53−1: refused as an invalid event.
    expect(() => readFeedEvents(page('json', `{"entries":[${e.json}]}`), URL_)).toThrow(
      /refused GET .*feed entry 0: event id 9007199254740992 is above 2\^53−1/,
    );
    // XML: the decoder refuses an integer it cannot hold, naming the element and the digits.
    expect(() => page('xml', `<events type="array">${e.xml}</events>`)).toThrow(
      /<id> is typed integer but holds "9007199254740993"/,
    );
  });
});

describe('F3: changes absent, empty, spaced', () => {
  it.each([
    ['absent', undefined, []],
    ['empty', { json: '""', xml: '<changes></changes>' }, []],
    ['self-closed / only spaces', { json: '"   "', xml: '<changes/>' }, []],
    ['null / nil', { json: 'null', xml: '<changes nil="true"/>' }, []],
    [
      'spaces after commas',
      { json: '"name, due-date,  tag-list"', xml: '<changes>name, due-date,  tag-list</changes>' },
      ['name', 'due-date', 'tag-list'],
    ],
    ['no spaces', { json: '"name,status"', xml: '<changes>name,status</changes>' }, ['name', 'status']],
    [
      'stray commas and line breaks',
      { json: '",name ,\\n status,"', xml: '<changes>,name ,\n status,</changes>' },
      ['name', 'status'],
    ],
    [
      'a list (not a form the specs show)',
      {
        json: '["name"," status"]',
        xml: '<changes type="array"><change>name</change><change> status</change></changes>',
      },
      ['name', 'status'],
    ],
  ] as [string, { json: string; xml: string } | undefined, string[]][])(
    '%s → %j',
    (_name, changes, expected) => {
      const [e] = bothFormats([event('7', 'job_updated', changes)]);
      expect(e!.changes).toEqual(expected);
      const change = buildChange(
        { source: 'wf', service: 'workflow' },
        e!,
        { state: 'deleted', subject: null },
        (s) => s,
      );
      expect(change.changes).toEqual(expected);
    },
  );
});

describe('F5: event types not in the spec’s tables', () => {
  it.each([
    ['job_archived', 'job', 'archived'],
    ['work_area_created', 'work_area', 'created'],
    ['problem_dismissed', 'problem', 'dismissed'],
    ['title_group_metadata_updated', 'title_group', 'metadata_updated'],
    ['reindex', 'reindex', 'unknown'],
  ])('%s is still a change: %s + %s', (type, resourceType, operation) => {
    const [e] = bothFormats([event('7', type)]);
    expect(services.workflow.knownEventTypes.has(type)).toBe(false);
    const change = buildChange(
      { source: 'wf', service: 'workflow' },
      e!,
      { state: 'present', subject: { resource_type: 'subject', id: 10 } },
      (s) => s,
    );
    expect(change).toMatchObject({
      key: 'wf:7',
      event_type: type,
      resource_type: resourceType,
      operation,
      subject: { resource_type: resourceType, id: 10 },
    });
  });
});

describe('event timestamps', () => {
  it.each([
    ['2026-11-20T11:15:02+01:00', '2026-11-20T10:15:02.000Z'],
    ['2026-11-20T10:15:02.5Z', '2026-11-20T10:15:02.500Z'],
    // The workflow spec says only "ISO 8601": without a zone, UTC (never this machine's zone).
    ['2026-11-20T10:15:02', '2026-11-20T10:15:02.000Z'],
  ])('%s → occurred_at %s, in both formats', (sent, expected) => {
    const json = `{"entries":[{"resource_type":"event","id":1,"event_type":"job_created","timestamp":"${sent}"}]}`;
    const xml = `<events type="array"><event><id type="integer">1</id><event-type>job_created</event-type><timestamp type="datetime">${sent}</timestamp></event></events>`;
    expect(readFeedEvents(page('json', json), URL_)[0]!.timestamp).toBe(expected);
    expect(readFeedEvents(page('xml', xml), URL_)[0]!.timestamp).toBe(expected);
  });

  it('a zone-less datetime inside a resource is kept as sent, equal in both formats', () => {
    const fromXml = page('xml', '<job><due-date type="datetime">2026-11-30T12:00:00</due-date></job>');
    expect(fromXml).toStrictEqual({ resource_type: 'job', due_date: '2026-11-30T12:00:00' });
    expect(page('json', '{"resource_type":"job","due_date":"2026-11-30T12:00:00"}')).toStrictEqual(fromXml);
  });

  it('a timestamp that is no date-time fails the page, naming the entry', () => {
    const json = `{"entries":[{"resource_type":"event","id":1,"event_type":"job_created","timestamp":"yesterday"}]}`;
    expect(() => readFeedEvents(page('json', json), URL_)).toThrow(/entry 0.*no valid timestamp/);
  });
});
