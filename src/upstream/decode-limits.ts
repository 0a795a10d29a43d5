// What decoding one body may build. A parser turns a few bytes into far more memory and time (an
// empty JSON object `{},` is 3 bytes of text and ~61 bytes of V8 heap; an XML `<a/>` is 4 bytes
// and ~500 bytes at the parser's peak) and the normalisers recurse once per level, so the text is
// checked before it is parsed: its nesting depth, and how many containers and values (JSON) or
// markup nodes (XML elements, attributes, comments…) it would create. A check is one pass over
// the string with charCodeAt, jumping over quoted text and XML text with indexOf; nothing is
// copied. decode.ts turns a refusal into an UpstreamRefusedError naming the URL and the limit.

/**
 * Deepest nesting accepted, JSON objects and arrays alike (the top-level object is level 1), and
 * XML elements (the root is level 1); fast-xml-parser's own guard (maxNestedTags, 100 by default)
 * is set to it too. Real bodies nest 3–6 levels; 64 also keeps every later walk of a change
 * (normalisers, JSON.stringify of the change that embeds it, sinks) far from the stack's limit.
 */
export const MAX_DEPTH = 64;

/**
 * Containers (objects + arrays) a JSON body may hold: 1,000 + 1 per 16 characters, at most
 * 200,000. Measured with V8 (Node 24): `{}` costs ~61 bytes once parsed, `[]` ~37 (and ~100 once
 * the normaliser wraps it in `{ entries }`), against 2–3 bytes of text: unbounded, 2 MB of
 * `[{},{},…]` made a 129 MB process (the daemon measured 227 MB). At one per 16 characters,
 * containers cost at most ~6× the text, and the cap bounds them at ~20 MB whatever the body size.
 * Real bodies hold one container per 100–550 characters (a sandbox page of 50 expanded events:
 * 94 in 31 KB; the spec examples 1 per 96–870), so the budget leaves them a 6× margin; the floor
 * lets any small body through.
 */
export const MAX_JSON_CONTAINERS = 200_000;

/**
 * Keys and values a JSON body may hold, counted as the `,` and `:` outside strings (an object
 * member counts twice, a list item once): at most 100,000. Most values cost little (8 bytes per
 * array slot, ~32 per distinct string), keys do not: objects whose keys all differ each get V8
 * maps of their own, and unbounded, an 8 MB body of 100-key objects with distinct keys made a
 * 777 MB process and blocked 1.7 s; one object with 830,000 keys (dictionary mode) took 1.2 s to
 * parse and normalise. At the cap, the worst shapes measured cost ≤ 35 MB and ≤ 160 ms. Real
 * bodies hold one per ~20 characters (the sandbox page: 1,510 in 31 KB): the cap is ~2 MB of
 * real JSON, 13× the largest feed page. Each `,` or `:` is followed by at least one character,
 * so a body under 200,000 characters cannot pass the cap.
 */
export const MAX_JSON_VALUES = 100_000;

/**
 * Markup nodes an XML body may hold (elements, attributes, comments, CDATA sections, processing
 * instructions; closing tags are not counted): 1,000 + 1 per 8 characters, at most 50,000.
 * fast-xml-parser (validation + parse) is far hungrier than JSON.parse: ~500 bytes per `<a/>` at
 * its peak (2 MB of them: 295 MB of RSS and 470 ms blocked, unbounded) and ~1 KB per element with
 * an attribute; even a real page costs ~15× its text. At the cap, the worst shapes measured
 * (every element or attribute name distinct) peak at ~75 MB and ~300 ms. Real bodies are dense in markup, one node per 18–31 characters (a 45 KB sandbox
 * page: 1,482 nodes; the spec examples 1 per 18–29), hence 1 per 8 (a 2× margin over the densest)
 * rather than JSON's 1 per 16, and 50,000 nodes is ~1.5 MB of real XML, 10× the largest feed page.
 */
export const MAX_XML_NODES = 50_000;

/** Per this many characters of a body, one more container (JSON) or node (XML) is allowed. */
export const JSON_CHARS_PER_CONTAINER = 16;
export const XML_CHARS_PER_NODE = 8;
/** Allowed whatever the body's length. */
export const BUDGET_FLOOR = 1_000;

/**
 * Attributes of one XML element. Many attributes on one element are the parser's worst case
 * (~2 KB each: 55,000 on one element took 100 MB and 150 ms); real elements have at most 3.
 */
export const MAX_XML_ATTRIBUTES = 64;

/** What a body may hold, beyond the fixed MAX_DEPTH. */
export function jsonContainerBudget(length: number): number {
  return Math.min(MAX_JSON_CONTAINERS, BUDGET_FLOOR + Math.floor(length / JSON_CHARS_PER_CONTAINER));
}

export function xmlNodeBudget(length: number): number {
  return Math.min(MAX_XML_NODES, BUDGET_FLOOR + Math.floor(length / XML_CHARS_PER_NODE));
}

/** Which limit a body passes, or undefined. */
export type Excess = 'depth' | 'containers' | 'values' | 'nodes' | 'attributes' | undefined;

/**
 * Whether JSON text stays within MAX_DEPTH, jsonContainerBudget and MAX_JSON_VALUES. The exact
 * scan costs about half a JSON.parse, so it runs only when a cheaper bound says a limit could be
 * passed: the body's length, and the count of every `{` and `[` (strings included) found with
 * indexOf at memory speed. Otherwise only the depth is left to check, and the normaliser does
 * that on the parsed value (V8's JSON.parse is iterative and does not overflow on deep input).
 * Feed pages (20–150 KB, one container per ~100+ characters) and subjects never need the scan.
 */
export function checkJson(text: string): Excess {
  // Not even one bracket per character could pass the floor (most subjects).
  if (text.length <= BUDGET_FLOOR) return undefined;
  const budget = jsonContainerBudget(text.length);
  if (text.length < 2 * MAX_JSON_VALUES && bracketsUpTo(text, budget) <= budget) return undefined;
  return scanJson(text, budget);
}

/** Every `{` and `[` of the text, counted up to `limit + 1`. */
function bracketsUpTo(text: string, limit: number): number {
  let n = 0;
  for (let i = text.indexOf('{'); i >= 0 && n <= limit; i = text.indexOf('{', i + 1)) n++;
  for (let i = text.indexOf('['); i >= 0 && n <= limit; i = text.indexOf('[', i + 1)) n++;
  return n;
}

/**
 * The exact scan: depth, containers and values outside strings, refusing at the first limit
 * passed. Malformed text is left to JSON.parse: an unterminated string ends the scan.
 */
export function scanJson(text: string, containerBudget: number): Excess {
  const n = text.length;
  let depth = 0;
  let containers = 0;
  let values = 0;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      // The closing quote: the next one not escaped by an odd run of backslashes.
      for (;;) {
        const q = text.indexOf('"', i + 1);
        if (q < 0) return undefined;
        i = q;
        let b = q - 1;
        while (text.charCodeAt(b) === 0x5c /* \ */) b--;
        if (((q - 1 - b) & 1) === 0) break;
      }
    } else if (c === 0x2c /* , */ || c === 0x3a /* : */) {
      if (++values > MAX_JSON_VALUES) return 'values';
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (++depth > MAX_DEPTH) return 'depth';
      if (++containers > containerBudget) return 'containers';
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      depth--;
    }
  }
  return undefined;
}

/**
 * Whether XML text stays within MAX_DEPTH, xmlNodeBudget and MAX_XML_ATTRIBUTES. One pass from
 * `<` to `<` (indexOf), reading only the markup: comments, CDATA sections, processing
 * instructions and a DOCTYPE are skipped whole, quoted attribute values too. Text between tags is
 * never looked at. Malformed markup is left to the validator; the scan only has to stay an upper
 * bound on what the parser would build, and never loops.
 */
export function checkXml(text: string): Excess {
  const budget = xmlNodeBudget(text.length);
  const n = text.length;
  let depth = 0;
  let nodes = 0;
  let i = text.indexOf('<');
  while (i >= 0) {
    const c = text.charCodeAt(i + 1);
    if (c === 0x2f /* / */) {
      // A closing tag: `>` cannot appear in its name.
      depth--;
      i = text.indexOf('>', i + 2);
    } else {
      if (++nodes > budget) return 'nodes';
      if (c === 0x21 /* ! */) i = skipDeclaration(text, i);
      else if (c === 0x3f /* ? */) i = endOf(text, '?>', i + 2);
      else {
        // A start tag: count its attributes (each `=` outside quoted values) up to its `>`.
        let attributes = 0;
        let j = i + 1;
        for (; j < n; j++) {
          const d = text.charCodeAt(j);
          if (d === 0x3e /* > */) break;
          if (d === 0x22 /* " */ || d === 0x27 /* ' */) {
            j = text.indexOf(d === 0x22 ? '"' : "'", j + 1);
            if (j < 0) return undefined;
          } else if (d === 0x3d /* = */) {
            if (++attributes > MAX_XML_ATTRIBUTES) return 'attributes';
            if (++nodes > budget) return 'nodes';
          }
        }
        if (j >= n) return undefined;
        if (text.charCodeAt(j - 1) !== 0x2f /* / */ && ++depth > MAX_DEPTH) return 'depth';
        i = j;
      }
    }
    if (i < 0) return undefined;
    i = text.indexOf('<', i + 1);
  }
  return undefined;
}

/** Index of the last character of `end` found from `from`, or -1. */
function endOf(text: string, end: string, from: number): number {
  const at = text.indexOf(end, from);
  return at < 0 ? -1 : at + end.length - 1;
}

/** `<!--…-->`, `<![CDATA[…]]>`, or `<!DOCTYPE …>` whose internal subset `[…]` may hold `>`. */
function skipDeclaration(text: string, i: number): number {
  if (text.startsWith('<!--', i)) return endOf(text, '-->', i + 4);
  if (text.startsWith('<![CDATA[', i)) return endOf(text, ']]>', i + 9);
  const gt = text.indexOf('>', i + 2);
  const bracket = text.indexOf('[', i + 2);
  if (bracket < 0 || gt < 0 || gt < bracket) return gt;
  const close = text.indexOf(']', bracket + 1);
  return close < 0 ? -1 : text.indexOf('>', close + 1);
}
