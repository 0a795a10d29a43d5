// The XML pre-scan (checkXml, src/upstream/decode-limits.ts) against what fast-xml-parser, with
// the decoder's own options, actually builds. Documents are generated with the constructs a hostile
// upstream can use to make a quick scan and the parser disagree: comments, CDATA sections,
// processing instructions and DOCTYPEs holding `<`, `>`, `[`, `]` and quotes, quotes in odd places,
// unclosed constructs, stray closing tags, many attributes, deep nesting, long runs of elements.
// The parser runs without the validator and without its own depth guard, so the scan alone is
// measured.
import fc from 'fast-check';
import { XMLParser, XMLValidator } from 'fast-xml-parser';
import { describe, expect, it } from 'vitest';
import { checkXml, MAX_DEPTH, MAX_XML_ATTRIBUTES, xmlNodeBudget } from '../../src/upstream/decode-limits.js';
import { XML_PARSER_OPTIONS } from '../../src/upstream/xml-decode.js';

const parser = new XMLParser({ ...XML_PARSER_OPTIONS, maxNestedTags: Number.MAX_SAFE_INTEGER });

type XNode = Record<string, unknown>;

interface Built {
  elements: number;
  attributes: number;
  /** Most attributes on one element. */
  widest: number;
  depth: number;
  /** Text nodes, CDATA included. */
  texts: number;
}

/** What the parser built, counted on its output (preserveOrder: one key per node, ':@' its attributes). */
function measure(tree: XNode[]): Built {
  const built: Built = { elements: 0, attributes: 0, widest: 0, depth: 0, texts: 0 };
  const walk = (nodes: XNode[], depth: number): void => {
    for (const node of nodes) {
      for (const key of Object.keys(node)) {
        if (key === ':@') continue;
        if (key === '#text') {
          built.texts++;
          continue;
        }
        const attrs = Object.keys((node[':@'] as object | undefined) ?? {}).length;
        built.elements++;
        built.attributes += attrs;
        built.widest = Math.max(built.widest, attrs);
        built.depth = Math.max(built.depth, depth);
        walk(node[key] as XNode[], depth + 1);
      }
    }
  };
  walk(tree, 1);
  return built;
}

/** What the parser builds from `text`, or undefined when it throws (then it built nothing kept). */
function parsed(text: string): Built | undefined {
  try {
    return measure(parser.parse(text) as XNode[]);
  } catch {
    return undefined;
  }
}

const join = (parts: string[]): string => parts.join('');

// ---- generators ----

/** Text that trips a scan: markup characters, quotes, openers and closers of every construct. */
const tricky = fc
  .array(
    fc.constantFrom(
      '<',
      '>',
      '[',
      ']',
      '"',
      "'",
      '=',
      '/',
      '?>',
      '-->',
      ']]>',
      '<a/>',
      '<a>',
      '</a>',
      '<!--',
      '<![CDATA[',
      '<?',
      '<!DOCTYPE r>',
      ' ',
      'x',
      '&amp;',
      '\t',
      '\u00a0',
    ),
    { maxLength: 8 },
  )
  .map(join);

const name = fc.constantFrom('a', 'b', 'r', 'x-y', 'ns:a', '__proto__', 'constructor', 'toString');

/** An attribute as a serializer writes it (the value cannot hold its own quote). */
const attribute = fc
  .tuple(fc.constantFrom('a', 'b', 'c', 'rel', 'href', 'type'), fc.nat(99), fc.constantFrom('"', "'"), tricky)
  .map(([n, i, q, v]) => ` ${n}${i}=${q}${v.replaceAll(q, '')}${q}`);

/** Many attributes on one element, around the per-element limit. */
const manyAttributes = fc
  .integer({ min: MAX_XML_ATTRIBUTES - 4, max: MAX_XML_ATTRIBUTES + 20 })
  .map((n) => join(Array.from({ length: n }, (_, i) => ` a${i}="${i}"`)));

/** Inside a start tag: well-formed attributes, or junk with quotes where a name should be. */
const attributes = fc.oneof(
  { weight: 4, arbitrary: fc.array(attribute, { maxLength: 4 }).map(join) },
  { weight: 1, arbitrary: manyAttributes },
  {
    weight: 1,
    arbitrary: fc
      .tuple(fc.constantFrom(` 'x`, ` "x`, ' x="'), manyAttributes, fc.constantFrom(`'`, '"', ''))
      .map(join),
  },
  { weight: 1, arbitrary: tricky.map((t) => ` ${t}`) },
);

/** Constructs that may hide markup from a scan that reads them wrongly; some never closed. */
const declaration = fc.oneof(
  tricky.map((t) => `<!--${t.replaceAll('-->', '')}-->`),
  tricky.map((t) => `<![CDATA[${t.replaceAll(']]>', '')}]]>`),
  tricky.map((t) => `<?pi ${t.replaceAll('?>', '')}?>`),
  fc.constantFrom(
    '<?xml version="1.0" encoding="UTF-8"?>',
    "<?pi '?>",
    '<?pi "?><!-- "?>',
    '<!DOCTYPE r>',
    '<!DOCTYPE r SYSTEM "[">',
    '<!DOCTYPE r PUBLIC \'>\' "]">',
    '<!DOCTYPE r [<!ENTITY e "<a/>">]>',
    '<!DOCTYPE r [<!-- ] -->',
    '<!DOCTYPE r [',
    '<!ELEMENT a ANY>',
    '<!x>',
    '<!-',
    '<!--',
    '<![CDATA[',
    '<?pi',
    '</a>',
    '</r></r>',
    '<a b="',
  ),
);

/** A document: a prolog, one root built from the pieces above, and what may follow it. */
const document = fc.letrec<{ node: string; element: string }>((tie) => ({
  node: fc.oneof(
    // Past the depth, the first: plain text.
    { maxDepth: 3, withCrossShrink: true },
    { weight: 2, arbitrary: tricky },
    { weight: 3, arbitrary: tie('element') },
    { weight: 2, arbitrary: declaration },
    // Long runs of one small piece, to cross the node budget (1,000 + 1 per 8 characters).
    {
      weight: 1,
      arbitrary: fc
        .tuple(
          fc.constantFrom('<a/>', '<a b="1"/>', '<a></a>', ' <a/>', '<!---->', '<?p?>', '<![CDATA[]]>'),
          fc.integer({ min: 1, max: 5000 }),
        )
        .map(([piece, n]) => piece.repeat(n)),
    },
    // Deep nesting, around the depth limit.
    {
      weight: 1,
      arbitrary: fc
        .tuple(name, fc.integer({ min: MAX_DEPTH - 3, max: MAX_DEPTH + 10 }))
        .map(([n, d]) => `<${n}>`.repeat(d) + `</${n}>`.repeat(d)),
    },
  ),
  element: fc
    .tuple(name, attributes, fc.boolean(), fc.array(tie('node'), { maxLength: 4 }))
    .map(([n, a, empty, children]) => (empty ? `<${n}${a}/>` : `<${n}${a}>${join(children)}</${n}>`)),
})).element;

const hostileDocument = fc
  .tuple(
    fc.array(declaration, { maxLength: 3 }),
    document,
    fc.array(fc.oneof(declaration, tricky), { maxLength: 2 }),
  )
  .map(([before, root, after]) => join(before) + root + join(after));

/** Closed constructs only: nothing in them may change where the next markup starts. */
const closedProlog = fc
  .array(
    fc.oneof(
      tricky.map((t) => `<!--${t.replaceAll('-->', '')}-->`),
      tricky.map((t) => `<![CDATA[${t.replaceAll(']]>', '')}]]>`),
      tricky.map((t) => `<?pi ${t.replaceAll('?>', '')}?>`),
      fc.constantFrom(
        '<?xml version="1.0"?>',
        '<!DOCTYPE r>',
        '<!DOCTYPE r SYSTEM "[">',
        '<!DOCTYPE r SYSTEM "<a>" [<!-- ] -->]>',
        '<!DOCTYPE r [<!ENTITY e "<a/><a/>">]>',
        '<?pi "?><!-- "?>',
        "<?pi '?>",
      ),
    ),
    { maxLength: 4 },
  )
  .map(join);

const OVER = {
  elements: `<r>${'<a/>'.repeat(6_000)}</r>`,
  attributes: `<r${join(Array.from({ length: MAX_XML_ATTRIBUTES + 1 }, (_, i) => ` a${i}="${i}"`))}/>`,
  depth: '<a>'.repeat(MAX_DEPTH + 1) + '</a>'.repeat(MAX_DEPTH + 1),
};

describe('the XML pre-scan bounds what fast-xml-parser builds', () => {
  it('whatever the document, what it accepts the parser builds within the limits', () => {
    let accepted = 0;
    let parsedWhole = 0;
    fc.assert(
      fc.property(hostileDocument, (text) => {
        if (checkXml(text) !== undefined) return;
        accepted++;
        const built = parsed(text);
        if (built === undefined) return;
        parsedWhole++;
        const budget = xmlNodeBudget(text.length);
        expect(built.elements + built.attributes, 'elements and attributes').toBeLessThanOrEqual(budget);
        expect(built.widest, 'attributes of one element').toBeLessThanOrEqual(MAX_XML_ATTRIBUTES);
        expect(built.depth, 'depth').toBeLessThanOrEqual(MAX_DEPTH);
        expect(built.texts, 'text nodes').toBeLessThanOrEqual(2 * budget + 1);
      }),
      { numRuns: 400 },
    );
    // Not vacuous: many generated documents get through the scan and are parsed.
    expect(accepted).toBeGreaterThan(40);
    expect(parsedWhole).toBeGreaterThan(20);
  });

  it.each(Object.entries(OVER))(
    'a body over the %s limit is never accepted, whatever closed constructs come before it',
    (_limit, body) => {
      expect(parsed(body)).toBeDefined();
      fc.assert(
        fc.property(closedProlog, (prolog) => {
          expect(checkXml(prolog + body)).toBeDefined();
        }),
        { numRuns: 200 },
      );
    },
  );

  it('well-formed documents within the limits are accepted (no false refusal)', () => {
    const wellFormed = fc
      .letrec<{ element: string }>((tie) => ({
        element: fc
          .tuple(
            fc.constantFrom('a', 'b-c', 'ns:d'),
            fc.uniqueArray(
              fc.tuple(fc.constantFrom('a', 'b', 'c', 'rel', 'href'), fc.constantFrom('"', "'"), tricky),
              {
                maxLength: 3,
                selector: ([n]) => n,
              },
            ),
            fc.array(
              fc.oneof(
                { maxDepth: 4 },
                fc.constantFrom('text', '&amp; &#233;', ' '),
                tie('element'),
                tricky.map((t) => `<!--${t.replaceAll('--', '')}-->`),
                tricky.map((t) => `<![CDATA[${t.replaceAll(']]>', '')}]]>`),
              ),
              { maxLength: 4 },
            ),
          )
          .map(([n, attrs, children]) => {
            const a = join(
              attrs.map(
                ([k, q, v]) =>
                  ` ${k}=${q}${v.replaceAll(q, '').replaceAll('<', '&lt;').replaceAll('&', '&amp;')}${q}`,
              ),
            );
            return `<${n}${a}>${join(children)}</${n}>`;
          }),
      }))
      .element.map((root) => `<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE a>\n${root}\n`);
    fc.assert(
      fc.property(wellFormed, (text) => {
        expect(XMLValidator.validate(text)).toBe(true);
        expect(checkXml(text)).toBeUndefined();
      }),
      { numRuns: 300 },
    );
  });

  // Linear, not merely fast: 4 times the text may take at most ~4 times as long (a quadratic scan
  // takes 16 times); the bound leaves room for a loaded machine's noise.
  it.each([
    ['<a/> after a DOCTYPE', '<a/>', '<!DOCTYPE r SYSTEM "["><r>', '</r>'],
    ['text in one attribute value', 'x', '<r a="', '"/>'],
    ['spaces in a tag', ' ', '<r', '/>'],
    ['spaces and `=` in a tag', ' a=', '<r', '/>'],
    ["`a='` in a tag", "a='", '<r ', '/>'],
    ['quotes in a tag', '"', '<r x=', '/>'],
    ['mixed quotes in a tag', `'"`, '<r x=', '/>'],
    ['dashes in a comment', '-', '<r><!--', '--></r>'],
    ['question marks in a processing instruction', '?', '<?pi ', '?><r/>'],
    ['quotes in a processing instruction', `'"`, '<?pi ', '?><r/>'],
    ['processing instructions, a quote far behind them', '<?p?>', '<r>', '</r>"'],
    ['start tags, a quote far behind them', '<a/>', '<r>', '</r>"'],
    ['digits in a float', '1', '<r><f type="float">', 'x</f></r>'],
  ])('the scan is linear: %s', (_name, piece, head, tail) => {
    const body = (bytes: number) => head + piece.repeat(Math.ceil(bytes / piece.length)) + tail;
    const best = (text: string) => {
      let ms = Infinity;
      for (let run = 0; run < 3; run++) {
        const started = performance.now();
        checkXml(text);
        ms = Math.min(ms, performance.now() - started);
      }
      return ms;
    };
    const MB = 1024 * 1024;
    const one = best(body(MB));
    const four = best(body(4 * MB));
    expect(one, '1 MB (ms)').toBeLessThan(250);
    expect(four, `4 MB (ms), against ${one.toFixed(1)} ms for 1 MB`).toBeLessThan(8 * one + 20);
  });
});
