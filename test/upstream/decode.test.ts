import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DecodeError } from '../../src/core/errors.js';
import { decodeBody } from '../../src/upstream/decode.js';
import { normalizeDateTime } from '../../src/upstream/datetime.js';

const FIXTURES = fileURLToPath(new URL('./fixtures/', import.meta.url));
const XML = 'application/xml; charset=utf-8';
const JSON_CT = 'application/json; charset=utf-8';
const URL_ = 'http://127.0.0.1:4010/scheduling/api/events';
// What the scheduling adapter does: the spec names the scheduling's asset link `assets` in XML only.
const linkRel = (_type: string, rel: string): string => (rel === 'assets' ? 'asset' : rel);

function fixture(name: string): string {
  return readFileSync(`${FIXTURES}${name}`, 'utf8');
}

const SHAPES = [
  'title',
  'title_group',
  'brand',
  'scheduling',
  'platform',
  'external_id',
  'publication',
  'rule',
  'event',
  'events',
  'events_empty',
  'brands_paginated',
  'job',
  'asset',
  'task',
  'catalog',
  'workflow',
];

describe('XML and JSON of the same resource decode deep-equal', () => {
  it.each(SHAPES)('%s', (name) => {
    const fromXml = decodeBody(fixture(`${name}.xml`), XML, URL_, 'xml', { linkRel });
    const fromJson = decodeBody(fixture(`${name}.json`), JSON_CT, URL_, 'json', { linkRel });
    expect(fromXml).toStrictEqual(fromJson);
  });
});

describe('normalization details', () => {
  const title = decodeBody(fixture('title.xml'), XML, URL_, 'xml');

  it('decodes entities (named and numeric), keeps whitespace and numeric-looking strings', () => {
    expect(title).toMatchObject({
      resource_type: 'title',
      id: 42,
      name: 'Pilot & "Friends" – Ünïcode <x> é☺',
      padded: '  two  spaces  ',
      empty_string: '',
      numeric_looking: '007',
      note_text: null,
      licensor_link: 'http://127.0.0.1:4010/scheduling/api/licensors/3?a=1&b=2',
    });
  });

  it('turns datetimes with offsets into UTC with milliseconds and Z', () => {
    const s = decodeBody(fixture('scheduling.xml'), XML, URL_, 'xml', { linkRel });
    expect(s.put_up).toBe('2026-11-20T10:15:02.000Z');
    expect(s.take_down).toBe('2026-12-20T23:59:59.500Z');
    expect(s.asset_link).toBe('http://127.0.0.1:4010/scheduling/api/schedulings/900/asset');
    expect(s).not.toHaveProperty('assets_link');
  });

  it('embeds subject and source beside their links, typed by element name', () => {
    const e = decodeBody(fixture('event.xml'), XML, URL_, 'xml', { linkRel });
    expect(e.subject_link).toBe('http://127.0.0.1:4010/scheduling/api/schedulings/900');
    expect(e.subject).toMatchObject({ resource_type: 'subject', id: 900, external_id: 'S-900' });
    expect(e.source).toMatchObject({
      resource_type: 'rule',
      id: 9,
      end_offset_value: -7,
      day_part_from: null,
    });
    expect(e.timestamp).toBe('2026-11-20T10:16:00.000Z');
  });

  it('reads a paginated collection and keeps the feed order', () => {
    const c = decodeBody(fixture('brands_paginated.xml'), XML, URL_, 'xml');
    expect(c.total_entries).toBe(120);
    expect(c.next_link).toBe('http://127.0.0.1:4010/scheduling/api/brands?page=3&per_page=2');
    const events = decodeBody(fixture('events.xml'), XML, URL_, 'xml');
    expect((events.entries as { id: number }[]).map((e) => e.id)).toEqual([123457, 123458, 123459]);
    expect(events).not.toHaveProperty('total_entries');
  });

  it('JSON: leaves zone-less or invalid date-like strings alone', () => {
    const r = decodeBody(
      JSON.stringify({
        resource_type: 'x',
        a: '2026-11-20T10:15:02',
        b: '2026-02-30T00:00:00Z',
        c: '2026-11-20',
        d: ' 2026-11-20T10:15:02Z',
        e: '2026-11-20T10:15:02+0100',
        nested: { resource_type: 'y', when: ['2026-11-20T10:15:02.1234Z'] },
      }),
      JSON_CT,
      URL_,
      'json',
    );
    expect(r).toEqual({
      resource_type: 'x',
      a: '2026-11-20T10:15:02',
      b: '2026-02-30T00:00:00Z',
      c: '2026-11-20',
      d: ' 2026-11-20T10:15:02Z',
      e: '2026-11-20T09:15:02.000Z',
      nested: { resource_type: 'y', when: { entries: ['2026-11-20T10:15:02.123Z'] } },
    });
  });

  it('accepts a missing content type and a UTF-8 BOM', () => {
    expect(decodeBody('\ufeff<workflow/>', undefined, URL_, 'xml')).toEqual({ resource_type: 'workflow' });
    expect(decodeBody('{"resource_type":"workflow"}', 'application/vnd.api+json', URL_, 'json')).toEqual({
      resource_type: 'workflow',
    });
  });

  it('normalizeDateTime validates calendar and clock ranges', () => {
    expect(normalizeDateTime('2024-02-29T23:59:59-00:30')).toBe('2024-03-01T00:29:59.000Z');
    expect(normalizeDateTime('2026-11-20T10:15Z')).toBe('2026-11-20T10:15:00.000Z');
    for (const bad of [
      '2025-02-29T00:00:00Z',
      '2026-11-20T24:00:00Z',
      '2026-13-01T00:00:00Z',
      '2026-11-20T10:15:02+25:00',
    ]) {
      expect(normalizeDateTime(bad)).toBeUndefined();
    }
  });

  it('normalizeDateTime returns an already-normalized date-time as is, and still checks it', () => {
    // The short cut for `…:SS.mmmZ` must agree with the full path for every valid instant.
    fc.assert(
      fc.property(
        fc.date({ min: new Date(0), max: new Date(Date.UTC(9999, 11, 31)), noInvalidDate: true }),
        (d) => {
          const iso = d.toISOString();
          expect(normalizeDateTime(iso)).toBe(iso);
          expect(normalizeDateTime(iso.replace('Z', '+00:00'))).toBe(iso);
        },
      ),
    );
    for (const bad of ['2025-02-29T00:00:00.000Z', '2026-11-20T24:00:00.000Z', '2026-00-10T00:00:00.000Z'])
      expect(normalizeDateTime(bad)).toBeUndefined();
    // Not date-times at all: refused before the regular expression.
    for (const other of ['', 'T', '2026-11-20', '2026-11-20 10:15:00Z', 'Tuesday 2026-11-20T10:15Z'])
      expect(normalizeDateTime(other)).toBeUndefined();
  });
});

describe('bad bodies are DecodeErrors naming the URL', () => {
  const cases: [string, string, string | undefined, 'json' | 'xml', RegExp][] = [
    ['truncated XML', '<events type="array"><event><id type="integer">1</id>', XML, 'xml', /malformed XML/],
    ['mismatched XML tags', '<title><name>x</title></name>', XML, 'xml', /malformed XML/],
    ['text only "XML"', 'just text', XML, 'xml', /malformed XML/],
    ['declaration only', '<?xml version="1.0"?>', XML, 'xml', /malformed XML|root is not an element/],
    [
      'non-integer integer',
      '<title><id type="integer">4.2</id></title>',
      XML,
      'xml',
      /<id> is typed integer/,
    ],
    [
      'invalid datetime',
      '<e><t type="datetime">2026-02-30T00:00:00Z</t></e>',
      XML,
      'xml',
      /<t> is typed datetime/,
    ],
    [
      'datetime that is not one',
      '<e><t type="datetime">2026-11-20 10:00</t></e>',
      XML,
      'xml',
      /<t> is typed datetime/,
    ],
    ['bad boolean', '<e><b type="boolean">yes</b></e>', XML, 'xml', /<b> is typed boolean/],
    ['link without href', '<e><link rel="self"/></e>', XML, 'xml', /without href/],
    ['mixed content', '<e>text<b>x</b></e>', XML, 'xml', /mixes text/],
    ['truncated JSON', '{"resource_type":"events","entries":[{"id":1', JSON_CT, 'json', /malformed JSON/],
    [
      'JSON neither resource nor collection',
      '{"id":1}',
      JSON_CT,
      'json',
      /neither a resource_type nor an entries/,
    ],
    ['JSON array', '[{"resource_type":"x"}]', JSON_CT, 'json', /an array, not an object/],
    ['JSON entries not an array', '{"entries":{}}', JSON_CT, 'json', /entries is object, not an array/],
    ['empty body', '', JSON_CT, 'json', /empty body/],
    ['whitespace body', ' \n ', XML, 'xml', /empty body/],
    ['HTML by content type', 'Service Unavailable', 'text/html; charset=utf-8', 'json', /HTML page/],
    ['HTML by doctype', '<!DOCTYPE html><html><body>502</body></html>', XML, 'xml', /HTML page/],
    ['HTML by tag, no type', '  <html><body>oops</body></html>', undefined, 'xml', /HTML page/],
    [
      'XML when JSON was asked',
      '<title/>',
      XML,
      'json',
      /application\/xml does not match the requested json/,
    ],
    ['JSON when XML was asked', '{"resource_type":"t"}', JSON_CT, 'xml', /application\/json does not match/],
    ['text/plain', 'hello', 'text/plain', 'json', /text\/plain does not match/],
  ];

  it.each(cases)('%s', (_name, body, contentType, expected, reason) => {
    let caught: unknown;
    try {
      decodeBody(body, contentType, URL_, expected);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(DecodeError);
    expect((caught as DecodeError).url).toBe(URL_);
    expect((caught as DecodeError).message).toContain(URL_);
    expect((caught as DecodeError).reason).toMatch(reason);
    expect((caught as DecodeError).retryable).toBe(true);
  });
});

describe('a full page', () => {
  // Speed lives in the benchmark (npm run bench); here only that a large page decodes whole.
  it('decodes a 51-event XML page with embedded rules into 51 entries', () => {
    const events = fixture('events.xml');
    const page = events.replace(
      /(<events type="array">)([\s\S]*)(<\/events>)/,
      (_m, a, body, c) => a + body.repeat(17) + c,
    );
    expect((decodeBody(page, XML, URL_, 'xml', { linkRel }).entries as unknown[]).length).toBe(51);
  });
});
