// Typed XML values and names that upstream controls (src/upstream/xml-decode.ts): numbers are
// scanned, never matched by a backtracking pattern, and a number or date-time thousands of
// characters long is a shape error whose message carries a cut of it; element names and link rels
// that Object.prototype holds (`__proto__`, `constructor`, `toString`…) become plain own fields,
// exactly as the same names do in JSON, and never touch a prototype.
import { describe, expect, it } from 'vitest';
import { DecodeError } from '../../src/core/errors.js';
import { buildChange } from '../../src/pipeline/change.js';
import type { Resource } from '../../src/core/resource.js';
import { decodeBody } from '../../src/upstream/decode.js';
import { MAX_DATETIME_CHARS, normalizeDateTime } from '../../src/upstream/datetime.js';
import { MAX_FLOAT_CHARS, MAX_INTEGER_CHARS, MESSAGE_CHARS } from '../../src/upstream/xml-decode.js';

const XML = 'application/xml; charset=utf-8';
const JSON_CT = 'application/json; charset=utf-8';
const URL_ = 'http://127.0.0.1:4010/scheduling/api/titles/7';

const xml = (body: string) => decodeBody(body, XML, URL_, 'xml');
const json = (body: string) => decodeBody(body, JSON_CT, URL_, 'json');
const field = (type: string, text: string) => xml(`<title><v type="${type}">${text}</v></title>`).v;

function shapeError(body: string): DecodeError {
  try {
    xml(body);
  } catch (err) {
    expect(err).toBeInstanceOf(DecodeError);
    return err as DecodeError;
  }
  throw new Error('decoded');
}

describe('typed numbers', () => {
  it.each([
    ['integer', '42', 42],
    ['integer', '-7', -7],
    ['integer', '+0012', 12],
    ['integer', ' 9007199254740991 ', 9007199254740991],
    ['float', '1.5', 1.5],
    ['float', '-0.25e-3', -0.00025],
    ['float', '.5', 0.5],
    ['float', '5.', 5],
    ['float', '+1E10', 1e10],
    ['float', '3', 3],
  ])('%s %j decodes to %j', (type, text, value) => {
    expect(field(type, text)).toBe(value);
  });

  it.each([
    ['integer', '4.2'],
    ['integer', '9007199254740993'],
    ['integer', '0x1F'],
    ['integer', '1e3'],
    ['integer', ''],
    ['integer', '+'],
    ['integer', '１２'],
    ['float', '.'],
    ['float', 'e5'],
    ['float', '1e'],
    ['float', '1.2.3'],
    ['float', 'Infinity'],
    ['float', 'NaN'],
    ['float', '1e400'],
    ['float', '--1'],
    ['float', '1_000'],
  ])('%s %j is a shape error', (type, text) => {
    expect(shapeError(`<title><v type="${type}">${text}</v></title>`).message).toContain(
      `<v> is typed ${type} but holds ${JSON.stringify(text)}`,
    );
  });

  it('the longest accepted texts decode; one character more is a shape error', () => {
    expect(field('integer', '0'.repeat(MAX_INTEGER_CHARS - 1) + '7')).toBe(7);
    expect(() => field('integer', '0'.repeat(MAX_INTEGER_CHARS) + '7')).toThrow(/typed integer/);
    expect(field('float', `1.${'0'.repeat(MAX_FLOAT_CHARS - 2)}`)).toBe(1);
    expect(() => field('float', `1.${'0'.repeat(MAX_FLOAT_CHARS - 1)}`)).toThrow(/typed float/);
  });

  // The old pattern (\d+\.?\d*) took 3.9 s on 40,000 digits and an `x` (it splits the digits
  // between its two runs every way before failing): 250,000 would take minutes.
  it.each([
    ['float', `${'1'.repeat(250_000)}x`],
    ['float', `${'1'.repeat(250_000)}`],
    ['float', `1.${'1'.repeat(250_000)}e`],
    ['integer', `${'1'.repeat(250_000)}x`],
    ['datetime', `2026-11-20T10:15:02.${'1'.repeat(250_000)}x`],
  ])('250,000 digits typed %s: a shape error at once, its message cut', (type, text) => {
    const body = `<title><weight type="${type}">${text}</weight></title>`;
    const started = performance.now();
    const err = shapeError(body);
    expect(performance.now() - started).toBeLessThan(1000);
    expect(err.message).toBe(
      `cannot decode response of GET ${URL_}: <weight> is typed ${type} but holds ` +
        `${JSON.stringify(`${text.slice(0, 40)}…[${text.length - 40} more characters]`)}`,
    );
  });

  it('a date-time longer than any a service writes is no date-time, in JSON as in XML', () => {
    const long = `2026-11-20T10:15:02.${'1'.repeat(MAX_DATETIME_CHARS - 21)}Z`;
    expect(long.length).toBe(MAX_DATETIME_CHARS);
    expect(normalizeDateTime(long)).toBe('2026-11-20T10:15:02.111Z');
    const longer = long.replace('Z', '1Z');
    expect(normalizeDateTime(longer)).toBeUndefined();
    expect(json(`{"resource_type":"title","t":"${longer}"}`).t).toBe(longer);
    expect(() => field('datetime', longer)).toThrow(/typed datetime/);
  });

  it('an element name thousands of characters long is cut in the message', () => {
    const name = 'n'.repeat(100_000);
    const err = shapeError(`<title><${name} type="integer">x</${name}></title>`);
    expect(err.message).toBe(
      `cannot decode response of GET ${URL_}: <${'n'.repeat(40)}…[${name.length - 40} more characters]> is typed integer but holds "x"`,
    );
    // The validator's own message quotes the name: cut too.
    const bad = `1${'n'.repeat(100_000)}`;
    const invalid = shapeError(`<title><${bad}>x</${bad}></title>`).message;
    expect(invalid).toBe(
      `cannot decode response of GET ${URL_}: malformed XML: ${`Tag '${bad}' is an invalid name.`.slice(0, MESSAGE_CHARS)}…[${`Tag '${bad}' is an invalid name.`.length - MESSAGE_CHARS} more characters] (line 1, column 100010)`,
    );
    const rel = `r"\u001b[31m${'r'.repeat(100_000)}`;
    expect(shapeError(`<title><link rel='${rel}'/></title>`).message).toBe(
      `cannot decode response of GET ${URL_}: <link rel=${JSON.stringify(`${rel.slice(0, 40)}…[${rel.length - 40} more characters]`)}> ` +
        `without href in <title>`,
    );
  });
});

describe('names that Object.prototype holds are plain fields', () => {
  const NAMES = [...Object.getOwnPropertyNames(Object.prototype), 'prototype'];

  it.each(NAMES)('<%s> as an element, an attribute and a link rel', (name) => {
    const subject = xml(
      `<title ${name}="a"><${name}>text</${name}><list type="array"><${name}>x</${name}></list>` +
        `<link rel="${name}" href="http://h/l"><${name} ${name}="b"><id type="integer">3</id></${name}></link>` +
        `</title>`,
    );
    expect(Object.getPrototypeOf(subject)).toBe(Object.prototype);
    expect(Object.getOwnPropertyDescriptor(subject, `${name}_link`)?.value).toBe('http://h/l');
    // The link's embedded resource came last and replaced the element's text, as in JSON.
    expect(Object.getOwnPropertyDescriptor(subject, name)?.value).toEqual({ resource_type: name, id: 3 });
    expect((subject.list as { entries: unknown[] }).entries).toEqual(['x']);
    const same = json(
      JSON.stringify({
        resource_type: 'title',
        [name]: 'text',
        list: ['x'],
        [`${name}_link`]: 'http://h/l',
      }).replace('}', `,"${name}":{"resource_type":"${name}","id":3}}`),
    );
    expect(JSON.stringify(subject)).toBe(JSON.stringify(same));
    expect(subject).toEqual(same);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('an XML subject with __proto__ and constructor fields: a change with them as own fields, as from JSON', () => {
    const fromXml = xml(
      '<title><id type="integer">7</id><__proto__><polluted type="boolean">true</polluted></__proto__>' +
        '<constructor>c</constructor><prototype type="integer">1</prototype>' +
        '<link rel="__proto__" href="http://h/p"><thing><polluted type="boolean">true</polluted></thing></link>' +
        '</title>',
    ) as Resource;
    const fromJson = json(
      '{"resource_type":"title","id":7,"__proto__":{"resource_type":"__proto__","polluted":true},' +
        '"constructor":"c","prototype":1,"__proto___link":"http://h/p",' +
        '"__proto__":{"resource_type":"thing","polluted":true}}',
    ) as Resource;
    for (const subject of [fromXml, fromJson]) {
      expect(Object.getPrototypeOf(subject)).toBe(Object.prototype);
      expect(Object.keys(subject)).toEqual([
        'resource_type',
        'id',
        '__proto__',
        'constructor',
        'prototype',
        '__proto___link',
      ]);
      expect((subject as Record<string, unknown>).polluted).toBeUndefined();
    }
    expect(fromXml).toEqual(fromJson);
    const change = buildChange(
      { source: 'sched', service: 'scheduling' },
      {
        id: 12,
        event_type: 'title_updated',
        timestamp: '2026-11-20T10:15:02.000Z',
        changes: [],
        self_link: null,
        subject_link: 'http://h/t/7',
      },
      { state: 'present', subject: fromXml },
      (s) => s,
    );
    const subject = change.subject as Record<string, unknown>;
    expect(Object.getOwnPropertyDescriptor(subject, '__proto__')?.value).toEqual({
      resource_type: 'thing',
      polluted: true,
    });
    expect(subject.constructor).toBe('c');
    expect(subject.polluted).toBeUndefined();
    const wire = JSON.stringify(change);
    expect(wire).toContain('"__proto__":{"resource_type":"thing","polluted":true}');
    expect(JSON.parse(wire)).toEqual(change);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });
});
