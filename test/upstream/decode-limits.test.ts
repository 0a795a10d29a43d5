// Bounded decoding (src/upstream/decode-limits.ts): a body that would build too much — nested too
// deep, too many containers, keys and values, or XML nodes — is refused before it is parsed, with
// an UpstreamRefusedError naming the URL and the limit; never a RangeError, never gigabytes.
// Real bodies, large ones included, decode exactly as before.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DecodeError, UpstreamRefusedError } from '../../src/core/errors.js';
import { decodeBody } from '../../src/upstream/decode.js';
import {
  checkJson,
  checkXml,
  jsonContainerBudget,
  MAX_DEPTH,
  MAX_JSON_VALUES,
  MAX_XML_ATTRIBUTES,
  MAX_XML_NODES,
  scanJson,
  xmlNodeBudget,
} from '../../src/upstream/decode-limits.js';

const FIXTURES = fileURLToPath(new URL('./fixtures/', import.meta.url));
const URL_ = 'http://127.0.0.1:4010/scheduling/api/events?newer_than=12';
const JSON_CT = 'application/json; charset=utf-8';
const XML_CT = 'application/xml; charset=utf-8';

const fixture = (name: string): string => readFileSync(`${FIXTURES}${name}`, 'utf8');

function refusal(body: string, format: 'json' | 'xml'): UpstreamRefusedError {
  let caught: unknown;
  try {
    decodeBody(body, format === 'json' ? JSON_CT : XML_CT, URL_, format);
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(UpstreamRefusedError);
  const err = caught as UpstreamRefusedError;
  expect(err.url).toBe(URL_);
  expect(err.message).toContain(URL_);
  expect(err.retryable).toBe(false);
  return err;
}

/** `depth` objects nested in each other: {"resource_type":"x","a":{"a":…{}…}}. */
const nestedObjects = (depth: number, pad = ''): string =>
  `{"resource_type":"x"${pad},"a":` + '{"a":'.repeat(depth - 2) + '{}' + '}'.repeat(depth - 2) + '}';

describe('JSON nesting', () => {
  it('100,000 nested arrays: too_deep naming the URL and the limit, no RangeError', () => {
    const body = `{"entries":${'['.repeat(100_000)}${']'.repeat(100_000)}}`;
    const err = refusal(body, 'json');
    expect(err.reason).toBe('too_deep');
    expect(err.message).toBe(
      `refused GET ${URL_}: JSON nesting is deeper than ${MAX_DEPTH} levels of objects and arrays`,
    );
  });

  it('a bare top-level array nested 100,000 deep is refused the same way', () => {
    expect(refusal('['.repeat(100_000) + ']'.repeat(100_000), 'json').reason).toBe('too_deep');
  });

  it('a subject nested 3,000 objects deep: too_deep', () => {
    const err = refusal(nestedObjects(3_000), 'json');
    expect(err.reason).toBe('too_deep');
    expect(err.message).toContain(`deeper than ${MAX_DEPTH} levels`);
  });

  // Short bodies skip the scan (few brackets): the normaliser checks the depth. Long ones are
  // scanned. Both must draw the line at the same place.
  it.each([
    ['short (checked by the normaliser)', ''],
    ['long (checked by the scan)', `,"pad":"${'x'.repeat(250_000)}"`],
  ])('%s: 64 levels decode, 65 are refused', (_name, pad) => {
    const ok = decodeBody(nestedObjects(MAX_DEPTH, pad), JSON_CT, URL_, 'json');
    let deepest: unknown = ok;
    let levels = 0;
    while (deepest !== null && typeof deepest === 'object') {
      levels++;
      deepest = (deepest as { a?: unknown }).a;
    }
    expect(levels).toBe(MAX_DEPTH);
    expect(refusal(nestedObjects(MAX_DEPTH + 1, pad), 'json').reason).toBe('too_deep');
  });

  it('lists count as levels, and as what they become: a list nested 63 deep in a page decodes', () => {
    const list = (d: number): string => '['.repeat(d) + ']'.repeat(d);
    // {"entries":[…]}: the page is level 1, `entries` level 2.
    expect(() => decodeBody(`{"entries":${list(MAX_DEPTH - 1)}}`, JSON_CT, URL_, 'json')).not.toThrow();
    expect(refusal(`{"entries":${list(MAX_DEPTH)}}`, 'json').reason).toBe('too_deep');
  });
});

describe('JSON size in values', () => {
  it('2 MB of [{},{},…] in an entries page: too_many_values, refused without parsing', () => {
    const body = `{"entries":[${Array(700_000).fill('{}').join(',')}]}`;
    expect(body.length).toBeGreaterThan(2_000_000);
    const started = performance.now();
    const err = refusal(body, 'json');
    expect(performance.now() - started).toBeLessThan(500);
    expect(err.reason).toBe('too_many_values');
    expect(err.message).toBe(
      `refused GET ${URL_}: JSON body holds more than ${MAX_JSON_VALUES} keys and values`,
    );
  });

  it('more objects and arrays than 1 per 16 characters: too_many_values naming that budget', () => {
    const body = `{"entries":[${Array(40_000).fill('[]').join(',')}]}`;
    const budget = jsonContainerBudget(body.length);
    expect(budget).toBe(1_000 + Math.floor(body.length / 16));
    const err = refusal(body, 'json');
    expect(err.reason).toBe('too_many_values');
    expect(err.message).toBe(
      `refused GET ${URL_}: JSON body holds more than ${budget} objects and arrays (the limit for its ` +
        `${body.length} characters: 1000 + 1 per 16 characters, at most 200000)`,
    );
  });

  it('one object with 150,000 distinct keys: too_many_values', () => {
    const keys = Array.from({ length: 150_000 }, (_, i) => `"k${i}":0`).join(',');
    const err = refusal(`{"resource_type":"x","o":{${keys}}}`, 'json');
    expect(err.reason).toBe('too_many_values');
    expect(err.message).toContain(`more than ${MAX_JSON_VALUES} keys and values`);
  });

  it('a large real page (850 KB, 1,200 events, scanned in full) decodes exactly as its events do', () => {
    const one = JSON.parse(fixture('events.json')) as { entries: unknown[] };
    const page = JSON.stringify({ ...one, entries: Array(400).fill(one.entries).flat() });
    expect(page.length).toBeGreaterThan(800_000);
    expect(checkJson(page)).toBeUndefined();
    const single = decodeBody(fixture('events.json'), JSON_CT, URL_, 'json');
    const whole = decodeBody(page, JSON_CT, URL_, 'json');
    expect(whole.entries).toEqual(Array(400).fill(single.entries).flat());
  });

  it('brackets, quotes and escapes inside strings are not structure', () => {
    const tricky = '{[\\"}]\\\\';
    const s = JSON.stringify(`${tricky}{{{{[[[[`.repeat(20));
    const body = `{"resource_type":"x","entries_text":${s},"list":[${Array(30_000).fill(s).join(',')}]}`;
    expect(body.length).toBeGreaterThan(200_000);
    expect(scanJson(body, jsonContainerBudget(body.length))).toBeUndefined();
    const decoded = decodeBody(body, JSON_CT, URL_, 'json') as unknown as { list: { entries: string[] } };
    expect(decoded.list.entries).toHaveLength(30_000);
    expect(decoded.list.entries[0]).toBe(JSON.parse(s));
  });

  it('the scan agrees with the parsed value on any JSON (depth and containers)', () => {
    const measure = (v: unknown, depth: number): { depth: number; containers: number } => {
      if (v === null || typeof v !== 'object') return { depth: depth - 1, containers: 0 };
      const kids = Object.values(v).map((c) => measure(c, depth + 1));
      return {
        depth: Math.max(depth, ...kids.map((k) => k.depth)),
        containers: 1 + kids.reduce((n, k) => n + k.containers, 0),
      };
    };
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 6 }), (v) => {
        const text = JSON.stringify(v);
        const { depth, containers } = measure(v, 1);
        expect(scanJson(text, containers)).toBeUndefined();
        if (containers > 0) expect(scanJson(text, containers - 1)).toBe('containers');
        // Within MAX_DEPTH by construction; a deeper copy of it is refused.
        expect(depth).toBeLessThanOrEqual(7);
        expect(scanJson('['.repeat(MAX_DEPTH) + text + ']'.repeat(MAX_DEPTH), Infinity)).toBe(
          containers > 0 ? 'depth' : undefined,
        );
      }),
      { numRuns: 300 },
    );
  });

  it('malformed JSON under the limits is still a DecodeError', () => {
    expect(() => decodeBody('{"resource_type":"x","a":[1,2', JSON_CT, URL_, 'json')).toThrow(DecodeError);
    expect(() => decodeBody('{"resource_type":"x","a":"unterminated', JSON_CT, URL_, 'json')).toThrow(
      DecodeError,
    );
  });
});

describe('XML', () => {
  const page = (events: string): string => `<?xml version="1.0"?><events type="array">${events}</events>`;

  it('many elements: too_many_values naming the URL and the limit', () => {
    const body = page('<event><id type="integer">1</id></event>'.repeat(60_000));
    const err = refusal(body, 'xml');
    expect(err.reason).toBe('too_many_values');
    expect(err.message).toBe(
      `refused GET ${URL_}: XML body holds more than ${xmlNodeBudget(body.length)} elements, attributes ` +
        `and other nodes (the limit for its ${body.length} characters: 1000 + 1 per 8 characters, at most ` +
        `${MAX_XML_NODES})`,
    );
  });

  it('2 MB of <a/>: too_many_values, refused at once', () => {
    const started = performance.now();
    const err = refusal(`<a>${'<a/>'.repeat(500_000)}</a>`, 'xml');
    expect(performance.now() - started).toBeLessThan(500);
    expect(err.reason).toBe('too_many_values');
  });

  it('an element with too many attributes: too_many_values', () => {
    const attrs = Array.from({ length: MAX_XML_ATTRIBUTES + 1 }, (_, i) => ` a${i}="1"`).join('');
    const err = refusal(`<subject${attrs}><id type="integer">1</id></subject>`, 'xml');
    expect(err.reason).toBe('too_many_values');
    expect(err.message).toBe(
      `refused GET ${URL_}: an XML element has more than ${MAX_XML_ATTRIBUTES} attributes`,
    );
  });

  it('deep XML is still refused: 64 levels decode, 65 and 100,000 are too_deep', () => {
    const nested = (depth: number): string =>
      `<subject>${'<a>'.repeat(depth - 2)}<b>x</b>${'</a>'.repeat(depth - 2)}</subject>`;
    expect(() => decodeBody(nested(MAX_DEPTH), XML_CT, URL_, 'xml')).not.toThrow();
    for (const depth of [MAX_DEPTH + 1, 100_000]) {
      const err = refusal(nested(depth), 'xml');
      expect(err.reason).toBe('too_deep');
      expect(err.message).toBe(
        `refused GET ${URL_}: XML nesting is deeper than ${MAX_DEPTH} levels of elements`,
      );
    }
  });

  it('comments, CDATA, a bare DOCTYPE, processing instructions and `>` in attributes are read as such', () => {
    const body =
      '<?xml version="1.0"?><!DOCTYPE subject ><?pi <a><a>?>' +
      '<subject><!-- <a><a><a> --><id type="integer">7</id>' +
      '<note><![CDATA[<a><a><a>]]></note><link rel=\'self\' href="http://h/x?a=1&amp;b=>2"/></subject>';
    expect(checkXml(body)).toBeUndefined();
    expect(decodeBody(body, XML_CT, URL_, 'xml')).toMatchObject({
      id: 7,
      note: '<a><a><a>',
      self_link: 'http://h/x?a=1&b=>2',
    });
  });

  it.each([
    ['an external identifier', '<!DOCTYPE subject SYSTEM "http://h/s.dtd">'],
    ['a public identifier', '<!DOCTYPE subject PUBLIC "-//X//Y//EN" "s.dtd">'],
    ['an internal subset', '<!DOCTYPE subject [ ]>'],
    ['declared entities (billion laughs)', '<!DOCTYPE subject [<!ENTITY a "x"><!ENTITY b "&a;&a;">]>'],
    ['an external entity (XXE)', '<!DOCTYPE subject [<!ENTITY x SYSTEM "file:///etc/passwd">]>'],
    ['no name', '<!DOCTYPE >'],
    ['no end', '<!DOCTYPE subject'],
  ])('a DOCTYPE with %s is refused whole, naming the URL and where', (_name, doctype) => {
    const body = `<?xml version="1.0"?>${doctype}<subject><id type="integer">7</id></subject>`;
    const err = refusal(body, 'xml');
    expect(err.reason).toBe('doctype');
    expect(err.message).toBe(
      `refused GET ${URL_}: XML body has a DOCTYPE with an external identifier (SYSTEM or PUBLIC) or ` +
        `an internal subset ([…]) at character 21; feedsync accepts only a bare <!DOCTYPE name>, as ` +
        `those declare entities and external resources`,
    );
  });

  // The bypass: the old scan looked for the `]` of an internal subset after the `[` in the quoted
  // identifier, found none, and stopped counting; the parser ends the DOCTYPE at its `>`.
  it('regression: <!DOCTYPE r SYSTEM "["> before 100,000 <a/> is refused, not decoded whole', () => {
    const body = `<!DOCTYPE r SYSTEM "["><r>${'<a/>'.repeat(100_000)}</r>`;
    const started = performance.now();
    expect(checkXml(body)).toEqual({ kind: 'doctype', at: 0 });
    expect(refusal(body, 'xml').reason).toBe('doctype');
    expect(performance.now() - started).toBeLessThan(500);
  });

  // The same trick with a processing instruction: XML ends it at the first `?>`, the parser skips
  // quoted text first, so what the scan took for a comment the parser reads as elements.
  it('regression: a processing instruction with an open quote cannot hide elements', () => {
    const body = `<r><?pi "?><!-- "?>${'<a/>'.repeat(100_000)}<!-- --></r>`;
    expect(checkXml(body)).toEqual({
      kind: 'malformed',
      what: 'a processing instruction the parser would end elsewhere',
      at: 3,
    });
    expect(() => decodeBody(body, XML_CT, URL_, 'xml')).toThrow(
      new DecodeError(
        URL_,
        'malformed XML: a processing instruction the parser would end elsewhere at character 3',
      ),
    );
  });

  it('737,364 attributes on one element: too_many_values, within a health probe', () => {
    const body = `<r${' a="1"'.repeat(737_364)}/>`;
    const started = performance.now();
    expect(refusal(body, 'xml').reason).toBe('too_many_values');
    expect(performance.now() - started).toBeLessThan(1000);
  });

  it('attributes are counted as the parser reads them, whatever the quotes around them', () => {
    // The parser's attribute pattern finds `a0="1"`… inside what a quote-tracking scan calls quoted
    // (the tag ends at the same `>` for both).
    const hidden = Array.from({ length: MAX_XML_ATTRIBUTES + 1 }, (_, i) => ` a${i}="1"`).join('');
    expect(checkXml(`<r 'x${hidden} '/>`)).toEqual({ kind: 'limit', excess: 'attributes' });
    expect(checkXml(`<r x='${hidden} '/>`)).toBeUndefined();
    // `=` inside values is not an attribute.
    const href = `http://h/x?${Array.from({ length: 200 }, (_, i) => `k${i}=v`).join('&amp;')}`;
    expect(checkXml(`<r><link rel="next" href="${href}"/></r>`)).toBeUndefined();
  });

  it.each([
    ['an unclosed comment', '<r><!-- <a/>', 3],
    ['an unclosed CDATA section', '<r><![CDATA[ <a/>', 3],
    ['an unclosed processing instruction', '<r><?pi <a/>', 3],
    ['an unclosed start tag or attribute value', '<r><a b="></r>', 3],
    ['an unclosed closing tag', '<r><a></a</r', 6],
    ['a closing tag with no element open', '</x><r/>', 0],
    [
      'a <! declaration that is neither a comment, a CDATA section nor a DOCTYPE',
      '<r><!ELEMENT a ANY></r>',
      3,
    ],
    ['a processing instruction the parser would end elsewhere', '<?pi "x?><r/>', 0],
    ['a processing instruction the parser would end elsewhere', '<?>?><r/>', 0],
    ['an unclosed processing instruction', '<?><r/>', 0],
  ])('%s is malformed XML naming where, never a partial count', (what, body, at) => {
    expect(checkXml(body)).toEqual({ kind: 'malformed', what, at });
    expect(() => decodeBody(body, XML_CT, URL_, 'xml')).toThrow(
      new DecodeError(URL_, `malformed XML: ${what} at character ${at}`),
    );
  });

  it('real pages pass with room to spare, and decode as before', () => {
    const events = fixture('events.xml');
    expect(checkXml(events)).toBeUndefined();
    const big = events.replace(
      /(<events type="array">)([\s\S]*)(<\/events>)/,
      (_m, a: string, body: string, c: string) => a + body.repeat(200) + c,
    );
    expect(big.length).toBeGreaterThan(600_000);
    expect(checkXml(big)).toBeUndefined();
    expect((decodeBody(big, XML_CT, URL_, 'xml').entries as unknown[]).length).toBe(600);
  });
});
