// Ways to damage a real upstream body. `mutationArb` is for property tests (anything goes: the
// decoder must cope); `breakFeedPage` is for the corrupting proxy and only produces damage that
// makes a feed page unusable (it never removes a whole event or alters an id into another valid
// one), so that "no event skipped" stays a fair demand on the poller.
import fc from 'fast-check';

export type Format = 'json' | 'xml';

const INSERTS = [
  '<x>',
  '</event>',
  '<event>',
  '<![CDATA[',
  ']]>',
  '<!--',
  '&bogus;',
  '&#0;',
  '&#x110000;',
  '<?pi x?>',
  '<!DOCTYPE x [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>',
  '&b;',
  '<id type="integer">-1</id>',
  '<id type="integer">1e400</id>',
  '<entries type="array"><entry/></entries>',
  ' nil="true"',
  ' type="datetime"',
  '{',
  '}',
  '[',
  ']',
  '"',
  ',',
  ':',
  'null',
  '"__proto__":{"polluted":1},',
  '"constructor":{"prototype":{"x":1}},',
  '\u0000',
  '\ud800',
  '\ufeff',
];

/** Elements (XML) or members (JSON) of a body, as [start, end) ranges, for dropping or retyping. */
function fieldRanges(body: string, format: Format): [number, number][] {
  const re =
    format === 'xml'
      ? /<([a-z][a-z-]*)(?: [^>]*)?>[^<]*<\/\1>|<link [^>]*\/>/g
      : /"[a-z_]+":(?:-?\d+(?:\.\d+)?|"(?:[^"\\]|\\.)*"|true|false|null),?/g;
  return [...body.matchAll(re)].map((m) => [m.index, m.index + m[0].length]);
}

function dropField(body: string, format: Format, pick: number): string {
  const ranges = fieldRanges(body, format);
  if (!ranges.length) return body;
  const [a, b] = ranges[pick % ranges.length]!;
  return body.slice(0, a) + body.slice(b);
}

const WRONG_VALUES_JSON = ['"x"', '{}', '[]', 'null', 'true', '-1', '1.5', '"2026-13-45T99:99:99Z"', '1e999'];
const WRONG_VALUES_XML = ['x', '', '-1', '1.5', 'true', '2026-13-45T99:99:99Z', '&amp;', '9'.repeat(30)];

function retypeField(body: string, format: Format, pick: number, value: number): string {
  const ranges = fieldRanges(body, format);
  if (!ranges.length) return body;
  const [a, b] = ranges[pick % ranges.length]!;
  const field = body.slice(a, b);
  let replaced: string;
  if (format === 'json') {
    const colon = field.indexOf(':');
    const comma = field.endsWith(',') ? ',' : '';
    replaced = `${field.slice(0, colon + 1)}${WRONG_VALUES_JSON[value % WRONG_VALUES_JSON.length]}${comma}`;
  } else {
    // Swap the text content, and sometimes the declared type too.
    replaced = field
      .replace(/>[^<]*</, `>${WRONG_VALUES_XML[value % WRONG_VALUES_XML.length]}<`)
      .replace(/type="[a-z]+"/, value % 2 ? 'type="boolean"' : 'type="integer"');
  }
  return body.slice(0, a) + replaced + body.slice(b);
}

/** One random mutation of `body` (fast-check). */
export function mutationArb(format: Format): fc.Arbitrary<(body: string) => string> {
  return fc.oneof(
    fc.nat().map((n) => (body: string) => body.slice(0, n % (body.length + 1))),
    fc.tuple(fc.nat(), fc.integer({ min: 0, max: 0xffff })).map(([n, code]) => (body: string) => {
      const i = n % Math.max(1, body.length);
      return body.slice(0, i) + String.fromCharCode(code) + body.slice(i + 1);
    }),
    fc.tuple(fc.nat(), fc.integer({ min: 0, max: 7 })).map(([n, bit]) => (body: string) => {
      const bytes = Buffer.from(body, 'utf8');
      if (!bytes.length) return body;
      bytes[n % bytes.length] ^= 1 << bit;
      return bytes.toString('utf8');
    }),
    fc.tuple(fc.nat(), fc.constantFrom(...INSERTS)).map(([n, s]) => (body: string) => {
      const i = n % (body.length + 1);
      return body.slice(0, i) + s + body.slice(i);
    }),
    fc.nat().map((n) => (body: string) => dropField(body, format, n)),
    fc.tuple(fc.nat(), fc.nat()).map(
      ([n, v]) =>
        (body: string) =>
          retypeField(body, format, n, v),
    ),
    fc.tuple(fc.nat(), fc.nat()).map(([a, len]) => (body: string) => {
      const i = a % (body.length + 1);
      return body.slice(0, i) + body.slice(i, i + (len % 200)) + body.slice(i);
    }),
  );
}

/** A body damaged by 1–4 random mutations. */
export function mutatedBodyArb(body: string, format: Format): fc.Arbitrary<string> {
  return fc
    .array(mutationArb(format), { minLength: 1, maxLength: 4 })
    .map((ms) => ms.reduce((b, m) => m(b), body));
}

/** A tiny seeded generator (mulberry32) for the proxy, so a failing run can be replayed. */
export function rng(seed: number): { next(): number; int(n: number): number } {
  let a = seed >>> 0;
  const next = (): number => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { next, int: (n) => Math.floor(next() * n) };
}

export type Damage = 'truncate' | 'control-char' | 'unclosed-tag' | 'drop-id' | 'retype-id' | 'bad-timestamp';

/**
 * Damage a feed page so that it cannot be used: the result is not well-formed, or one event lacks a
 * usable id or timestamp. Returns the damaged body and what was done.
 */
export function breakFeedPage(body: string, format: Format, r: ReturnType<typeof rng>): [string, Damage] {
  const damages: Damage[] = ['truncate', 'control-char', 'drop-id', 'retype-id', 'bad-timestamp'];
  if (format === 'xml') damages.push('unclosed-tag');
  const damage = damages[r.int(damages.length)]!;
  const idRe =
    format === 'xml' ? /<event>\s*<id type="integer">\d+<\/id>/g : /"resource_type":"event","id":\d+,/g;
  const tsRe = format === 'xml' ? /<timestamp type="datetime">[^<]*<\/timestamp>/g : /"timestamp":"[^"]*"/g;
  const pickMatch = (re: RegExp) => {
    const all = [...body.matchAll(re)];
    return all.length ? all[r.int(all.length)]! : undefined;
  };
  switch (damage) {
    case 'truncate': {
      // Anything before the root's final closing character leaves the document unterminated.
      const end = body.lastIndexOf(format === 'xml' ? '>' : '}');
      return [body.slice(0, r.int(Math.max(1, end))), damage];
    }
    case 'control-char': {
      if (format === 'json') {
        // A raw U+0001 is invalid anywhere in JSON, inside strings included.
        const i = r.int(body.length);
        return [body.slice(0, i) + '\u0001' + body.slice(i), damage];
      }
      // An element's '<' made text: its closing tag is then unmatched.
      const opens = [...body.matchAll(/<\/?[a-z]/g)].map((m) => m.index);
      const i = opens[r.int(opens.length)]!;
      return [body.slice(0, i) + '\u0001' + body.slice(i + 1), damage];
    }
    case 'unclosed-tag': {
      const afterTag = [...body.matchAll(/>/g)]
        .map((m) => m.index + 1)
        .filter((i) => i < body.lastIndexOf('<'));
      const i = afterTag[r.int(afterTag.length)] ?? 0;
      return [body.slice(0, i) + '<oops>' + body.slice(i), damage];
    }
    case 'drop-id':
    case 'retype-id': {
      const m = pickMatch(idRe);
      if (!m) return breakFeedPage(body, format, r);
      const replacement =
        format === 'xml'
          ? damage === 'drop-id'
            ? '<event>'
            : m[0].replace(/>(\d+)</, '>$1x<')
          : damage === 'drop-id'
            ? '"resource_type":"event",'
            : m[0].replace(/(\d+),$/, '"$1",');
      return [body.slice(0, m.index) + replacement + body.slice(m.index + m[0].length), damage];
    }
    case 'bad-timestamp': {
      const m = pickMatch(tsRe);
      if (!m) return breakFeedPage(body, format, r);
      const replacement =
        format === 'xml' ? '<timestamp type="datetime">yesterday</timestamp>' : '"timestamp":"yesterday"';
      return [body.slice(0, m.index) + replacement + body.slice(m.index + m[0].length), damage];
    }
  }
}
