// Every JSON (J1–J7) and XML (X1–X8) form the specs allow decodes to one normalized shape. The
// bodies below are written by hand from the specs' representation conventions, not taken from the
// sandbox, so they check the decoder against the specs' words rather than against our own writer.
// docs/dialects.md maps each dialect id to the tests here.
import { describe, expect, it } from 'vitest';
import type { Json, Representation } from '../../src/core/resource.js';
import { buildChange, type FeedEvent } from '../../src/pipeline/change.js';
import { readFeedEvents } from '../../src/pipeline/feed-page.js';
import { services } from '../../src/services/index.js';
import { decodeBody } from '../../src/upstream/decode.js';

const URL_ = 'http://127.0.0.1:9/workflow/api/events';
const B = 'http://127.0.0.1:9/workflow/api';

function json(body: string, contentType: string | undefined = 'application/json'): Representation {
  return decodeBody(body, contentType, URL_, 'json');
}
function xml(body: string, contentType: string | undefined = 'application/xml'): Representation {
  return decodeBody(body, contentType, URL_, 'xml', { linkRel: services.scheduling.linkRel });
}

/** The event every page below lists, normalized. */
const EVENT = {
  resource_type: 'event',
  id: 7,
  event_type: 'job_updated',
  timestamp: '2026-11-20T10:15:02.000Z',
  changes: 'name, due-date',
  self_link: `${B}/events/7`,
  subject_link: `${B}/jobs/10`,
};
const EVENT_JSON = `{"resource_type":"event","id":7,"event_type":"job_updated","timestamp":"2026-11-20T10:15:02Z",
  "changes":"name, due-date","self_link":"${B}/events/7","subject_link":"${B}/jobs/10"}`;
const EVENT_XML = `<event><id type="integer">7</id><event-type>job_updated</event-type>
  <timestamp type="datetime">2026-11-20T10:15:02Z</timestamp><changes>name, due-date</changes>
  <link rel="self" href="${B}/events/7"/><link rel="subject" href="${B}/jobs/10"/></event>`;

describe('J1/X4: collections', () => {
  it('J1: {"entries":[…]} without resource_type is a collection (the spec’s own wording)', () => {
    const page = json(`{"entries":[${EVENT_JSON}]}`);
    expect(page).toStrictEqual({ entries: [EVENT] });
    expect(readFeedEvents(page, URL_).map((e) => e.id)).toEqual([7]);
  });

  it('J1: with resource_type, total_entries, next_link and prev_link: same entries, label dropped', () => {
    const page = json(
      `{"resource_type":"events","total_entries":120,"next_link":"${B}/events?page=3","prev_link":"${B}/events?page=1","entries":[${EVENT_JSON}]}`,
    );
    expect(page).toStrictEqual({
      entries: [EVENT],
      total_entries: 120,
      next_link: `${B}/events?page=3`,
      prev_link: `${B}/events?page=1`,
    });
  });

  it('X4: total-entries and next/prev links equal the JSON form', () => {
    const page = xml(`<events type="array">${EVENT_XML}<total-entries type="integer">120</total-entries>
      <link rel="next" href="${B}/events?page=3"/><link rel="prev" href="${B}/events?page=1"/></events>`);
    expect(page).toStrictEqual(
      json(
        `{"entries":[${EVENT_JSON}],"total_entries":120,"next_link":"${B}/events?page=3","prev_link":"${B}/events?page=1"}`,
      ),
    );
  });

  it('J1: an empty collection, labelled or not', () => {
    expect(json('{"entries":[]}')).toStrictEqual({ entries: [] });
    expect(json('{"resource_type":"events","entries":[]}')).toStrictEqual({ entries: [] });
    expect(readFeedEvents(json('{"entries":[]}'), URL_)).toEqual([]);
  });

  it.each([
    ['self-closed', '<events type="array"/>'],
    ['open and close', '<events type="array"></events>'],
    ['whitespace inside', '<events type="array">\n   \t\n</events>'],
    ['single quotes', "<events type='array' />"],
  ])('X2: an empty list %s is an empty collection', (_name, body) => {
    expect(xml(body)).toStrictEqual({ entries: [] });
  });
});

describe('J2/X3: a list inside a resource is {"entries":[…]} from every form', () => {
  const expected = {
    resource_type: 'job',
    id: 10,
    deadlines: {
      entries: [
        { resource_type: 'deadline', name: 'QC', due: '2026-11-30T11:00:00.000Z' },
        { resource_type: 'deadline', name: 'Delivery', due: '2026-12-01T00:00:00.000Z' },
      ],
    },
    tag_list: { entries: ['hd', 'priority'] },
    empty_list: { entries: [] },
  };
  const deadlines =
    '{"resource_type":"deadline","name":"QC","due":"2026-11-30T12:00:00+01:00"},' +
    '{"resource_type":"deadline","name":"Delivery","due":"2026-12-01T00:00:00Z"}';

  it('J2: as {"entries":[…]}', () => {
    expect(
      json(
        `{"resource_type":"job","id":10,"deadlines":{"entries":[${deadlines}]},"tag_list":{"entries":["hd","priority"]},"empty_list":{"entries":[]}}`,
      ),
    ).toStrictEqual(expected);
  });

  it('J2: as a labelled collection', () => {
    expect(
      json(
        `{"resource_type":"job","id":10,"deadlines":{"resource_type":"deadlines","entries":[${deadlines}]},"tag_list":{"resource_type":"tag_list","entries":["hd","priority"]},"empty_list":{"entries":[]}}`,
      ),
    ).toStrictEqual(expected);
  });

  it('J2: as a bare array', () => {
    expect(
      json(
        `{"resource_type":"job","id":10,"deadlines":[${deadlines}],"tag_list":["hd","priority"],"empty_list":[]}`,
      ),
    ).toStrictEqual(expected);
  });

  it('X3: as type="array" elements', () => {
    expect(
      xml(`<job><id type="integer">10</id>
        <deadlines type="array">
          <deadline><name>QC</name><due type="datetime">2026-11-30T12:00:00+01:00</due></deadline>
          <deadline><name>Delivery</name><due type="datetime">2026-12-01T00:00:00Z</due></deadline>
        </deadlines>
        <tag-list type="array"><tag>hd</tag><tag>priority</tag></tag-list>
        <empty-list type="array"/>
      </job>`),
    ).toStrictEqual(expected);
  });

  it('a list of lists nests the same way in both formats', () => {
    expect(json('{"resource_type":"x","grid":[[1,2],[]]}')).toStrictEqual(
      xml(
        '<x><grid type="array"><row type="array"><c type="integer">1</c><c type="integer">2</c></row><row type="array"/></grid></x>',
      ),
    );
  });
});

describe('J3/X6: embedded subjects', () => {
  const event = (subject: Json): FeedEvent => ({
    ...readFeedEvents(json(`{"entries":[${EVENT_JSON}]}`), URL_)[0]!,
    subject: subject as FeedEvent['subject'],
  });
  const change = (subject: Json) =>
    buildChange(
      { source: 'wf', service: 'workflow' },
      event(subject),
      { state: 'present', subject: event(subject).subject! },
      (s) => s,
    );

  it('J3: labelled "subject" or with its own type, the change names it after the event', () => {
    const generic = json(`{"resource_type":"event","subject_link":"${B}/jobs/10",
      "subject":{"resource_type":"subject","id":10,"external_id":"J-10"}}`) as Record<string, Json>;
    const own = json(`{"resource_type":"event","subject_link":"${B}/jobs/10",
      "subject":{"resource_type":"job","id":10,"external_id":"J-10"}}`) as Record<string, Json>;
    expect(change(generic.subject!).subject).toStrictEqual({
      resource_type: 'job',
      id: 10,
      external_id: 'J-10',
    });
    expect(change(own.subject!).subject).toStrictEqual(change(generic.subject!).subject);
  });

  it('X6: an expansion inside the link, as <subject> or named after the resource, equals J3', () => {
    for (const tag of ['subject', 'job']) {
      const e = xml(`<event><link rel="subject" href="${B}/jobs/10">
        <${tag}><id type="integer">10</id><external-id>J-10</external-id></${tag}></link></event>`);
      expect(e).toStrictEqual({
        resource_type: 'event',
        subject_link: `${B}/jobs/10`,
        subject: { resource_type: tag, id: 10, external_id: 'J-10' },
      });
      expect(change((e as Record<string, Json>).subject!).subject).toStrictEqual({
        resource_type: 'job',
        id: 10,
        external_id: 'J-10',
      });
    }
  });
});

describe('J4: datetimes with any offset form', () => {
  it.each([
    ['2026-11-20T10:15:02Z', '2026-11-20T10:15:02.000Z'],
    ['2026-11-20T10:15:02.5Z', '2026-11-20T10:15:02.500Z'],
    ['2026-11-20T10:15:02.123456Z', '2026-11-20T10:15:02.123Z'],
    ['2026-11-20T11:15:02+01:00', '2026-11-20T10:15:02.000Z'],
    ['2026-11-20T04:45:02-05:30', '2026-11-20T10:15:02.000Z'],
    ['2026-11-20T11:15:02+0100', '2026-11-20T10:15:02.000Z'],
    ['2026-11-20T11:15:02.250+01', '2026-11-20T10:15:02.250Z'],
    ['2026-11-21T00:15:02+14:00', '2026-11-20T10:15:02.000Z'],
  ])('%s → %s in JSON and in XML', (sent, normalized) => {
    expect(json(`{"resource_type":"e","at":"${sent}"}`)).toStrictEqual({
      resource_type: 'e',
      at: normalized,
    });
    expect(xml(`<e><at type="datetime">${sent}</at></e>`)).toStrictEqual({
      resource_type: 'e',
      at: normalized,
    });
  });
});

describe('J5/X7: fields and links the spec does not list are kept', () => {
  it('in JSON as sent, in XML snake_cased, equal to each other', () => {
    const fromJson =
      json(`{"resource_type":"task","id":3,"colour_code":"red","extra":{"resource_type":"thing","n":1},
      "reviewer_link":"${B}/users/9","self_link":"${B}/tasks/3"}`);
    const fromXml = xml(`<task><id type="integer">3</id><colour-code>red</colour-code>
      <extra><n type="integer">1</n></extra>
      <link rel="reviewer" href="${B}/users/9"/><link rel="self" href="${B}/tasks/3"/></task>`);
    expect(fromJson).toStrictEqual({
      resource_type: 'task',
      id: 3,
      colour_code: 'red',
      extra: { resource_type: 'thing', n: 1 },
      reviewer_link: `${B}/users/9`,
      self_link: `${B}/tasks/3`,
    });
    expect(fromXml).toStrictEqual({ ...fromJson, extra: { resource_type: 'extra', n: 1 } });
  });

  it('an unknown field on an event never fails the page', () => {
    const page = json(`{"entries":[{"priority":"high","actor_link":"${B}/users/1",${EVENT_JSON.slice(1)}]}`);
    expect(readFeedEvents(page, URL_)).toHaveLength(1);
  });
});

describe('J6/X5: absent stays absent, null stays null, typed values', () => {
  it('JSON: null kept, absent absent', () => {
    const r = json('{"resource_type":"problem","description":null,"dismissed":false}');
    expect(r).toStrictEqual({ resource_type: 'problem', description: null, dismissed: false });
    expect(r).not.toHaveProperty('reporter');
  });

  it('XML: nil="true" is null (whatever its type), typed values typed, untyped text a string', () => {
    const r = xml(`<problem><description nil="true"/><reporter type="integer" nil="true"></reporter>
      <dismissed type="boolean">false</dismissed><count type="integer">-3</count><ratio type="float">0.25</ratio>
      <code>007</code><blank></blank><spaced>  a  b  </spaced></problem>`);
    expect(r).toStrictEqual({
      resource_type: 'problem',
      description: null,
      reporter: null,
      dismissed: false,
      count: -3,
      ratio: 0.25,
      code: '007',
      blank: '',
      spaced: '  a  b  ',
    });
    expect(r).not.toHaveProperty('note');
  });

  it('the same problem in both formats is deep-equal', () => {
    expect(
      xml(`<problem><description nil="true"/><dismissed type="boolean">true</dismissed>
        <created-at type="datetime">2026-11-20T11:00:00+01:00</created-at></problem>`),
    ).toStrictEqual(
      json(
        '{"resource_type":"problem","description":null,"dismissed":true,"created_at":"2026-11-20T10:00:00Z"}',
      ),
    );
  });
});

describe('J7/X8: content types and a byte-order mark', () => {
  it.each([
    'application/json',
    'application/json; charset=utf-8',
    'application/json;charset=UTF-8',
    'Application/JSON',
    'application/vnd.workflow.v1+json',
    'application/vnd.api+json; charset=utf-8',
    undefined,
  ])('JSON with %s', (ct) => {
    expect(json('{"entries":[]}', ct)).toStrictEqual({ entries: [] });
    expect(json('\ufeff{"resource_type":"workflow"}', ct)).toStrictEqual({ resource_type: 'workflow' });
  });

  it.each([
    'application/xml',
    'application/xml; charset=utf-8',
    'text/xml',
    'text/xml; charset="UTF-8"',
    'application/atom+xml',
    undefined,
  ])('XML with %s', (ct) => {
    expect(xml('<events type="array"/>', ct)).toStrictEqual({ entries: [] });
    expect(xml('\ufeff<?xml version="1.0" encoding="UTF-8"?>\n<workflow/>', ct)).toStrictEqual({
      resource_type: 'workflow',
    });
  });
});

describe('X1: XML syntax variants', () => {
  const expected = {
    resource_type: 'note',
    id: 5,
    body: 'Café & <b>bold</b> "quoted" \'single\'',
    creator: ' ops ',
    self_link: `${B}/jobs/10/notes/5?a=1&b=2`,
    job_link: `${B}/jobs/10`,
  };

  it.each([
    [
      'with declaration, indented',
      `<?xml version="1.0" encoding="UTF-8"?>
<note>
  <id type="integer">5</id>
  <body>Caf&#233; &amp; &lt;b&gt;bold&lt;/b&gt; &quot;quoted&quot; &apos;single&apos;</body>
  <creator> ops </creator>
  <link rel="self" href="${B}/jobs/10/notes/5?a=1&amp;b=2"/>
  <link rel="job" href="${B}/jobs/10"/>
</note>
`,
    ],
    [
      'no declaration, one line, CDATA, hex reference, single quotes, href before rel',
      `<note><id type='integer'>5</id><body><![CDATA[Caf]]>&#xE9;<![CDATA[ & <b>bold</b> "quoted" 'single']]></body><creator> ops </creator><link href='${B}/jobs/10/notes/5?a=1&amp;b=2' rel='self' /><link href="${B}/jobs/10" rel="job"></link></note>`,
    ],
    [
      'CRLF line breaks, a comment, tabs between elements',
      `<?xml version='1.0'?>\r\n<!-- generated -->\r\n<note>\r\n\t<id type="integer"> 5 </id>\r\n\t<body>Café &amp; &lt;b>bold&lt;/b> "quoted" 'single'</body>\r\n\t<creator> ops </creator>\r\n\t<link rel="self" href="${B}/jobs/10/notes/5?a=1&amp;b=2"/>\r\n\t<link rel="job" href="${B}/jobs/10"/>\r\n</note>\r\n`,
    ],
  ])('%s', (_name, body) => {
    expect(xml(body)).toStrictEqual(expected);
  });

  it('equals the JSON form', () => {
    expect(
      json(
        JSON.stringify({
          resource_type: 'note',
          id: 5,
          body: expected.body,
          creator: ' ops ',
          self_link: expected.self_link,
          job_link: expected.job_link,
        }),
      ),
    ).toStrictEqual(expected);
  });
});
