// What decoding one body may build. A parser turns a few bytes into far more memory and time (an
// empty JSON object `{},` is 3 bytes of text and ~61 bytes of V8 heap; an XML `<a/>` is 4 bytes
// and ~500 bytes at the parser's peak) and the normalisers recurse once per level, so the text is
// checked before it is parsed: its nesting depth, and how many containers and values (JSON) or
// markup nodes (XML elements, attributes, comments…) it would create. A check is one pass over
// the string with charCodeAt, jumping over quoted text and XML text with indexOf; nothing is
// copied. decode.ts turns a refusal into an UpstreamRefusedError naming the URL and the limit.

import { isSpace } from '../core/bounded-text.js';
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

/** Why checkXml refuses a body, or undefined when it may be parsed. */
export type XmlVerdict =
  | { kind: 'limit'; excess: 'depth' | 'nodes' | 'attributes' }
  /** A DOCTYPE other than the bare `<!DOCTYPE name>`, starting at character `at`. */
  | { kind: 'doctype'; at: number }
  /** Markup the parser would read otherwise than the scan does, or never close. */
  | { kind: 'malformed'; what: string; at: number }
  | undefined;

/**
 * Whether XML text stays within MAX_DEPTH, xmlNodeBudget and MAX_XML_ATTRIBUTES, read the way
 * fast-xml-parser reads it, so that what the scan counts bounds what the parser builds whatever the
 * text (the validator that runs first is not relied on):
 * - a start tag ends at the first `>` outside quotes (either quote, anywhere in the tag); its
 *   attributes are counted as the parser's attribute pattern finds them (`name = "value"` after the
 *   first whitespace), so no quote in an odd place can hide one;
 * - a closing tag ends at the next `>`, quotes or not, and needs an element open;
 * - comments, CDATA sections and processing instructions end where XML ends them; a processing
 *   instruction whose quotes would make the parser end it elsewhere is refused, and so is any
 *   other `<!…>` construct;
 * - a DOCTYPE is accepted only bare (`<!DOCTYPE name>`): an external identifier (SYSTEM, PUBLIC)
 *   or an internal subset (`[…]`) is where entities and external resources are declared, and where
 *   the parser, the validator and a quick scan can disagree on where the declaration ends; neither
 *   service sends a DOCTYPE at all;
 * - a construct that is never closed is refused rather than left to the parser.
 * Text nodes are not counted: the parser makes at most one per tag boundary, so they stay within
 * twice the nodes counted. One forward pass, indexOf between tags and charCodeAt inside them, each
 * character read a bounded number of times, nothing copied.
 */
export function checkXml(text: string): XmlVerdict {
  const budget = xmlNodeBudget(text.length);
  // Searches that only move forward: the ends of start tags and processing instructions, as the
  // parser finds them, and (behind those, within each tag) its attribute values.
  const markupQuotes = quotes(text);
  const tagEnds = finder(text, '>');
  const piEnds = finder(text, '?>');
  const valueQuotes = quotes(text);
  const equals = finder(text, '=');
  let depth = 0;
  let nodes = 0;
  for (let i = text.indexOf('<'); i >= 0;) {
    const c = text.charCodeAt(i + 1);
    /** The construct's last character. */
    let end: number;
    if (c === 0x2f /* / */) {
      end = text.indexOf('>', i + 2);
      if (end < 0) return malformed('an unclosed closing tag', i);
      // The parser would carry on at the top level, its stack empty: the depth counted would lag.
      if (depth === 0) return malformed('a closing tag with no element open', i);
      depth--;
    } else {
      if (++nodes > budget) return limit('nodes');
      if (c === 0x21 /* ! */) {
        if (text.startsWith('<!--', i)) {
          end = endOf(text, '-->', i + 4);
          if (end < 0) return malformed('an unclosed comment', i);
        } else if (text.startsWith('<![CDATA[', i)) {
          end = endOf(text, ']]>', i + 9);
          if (end < 0) return malformed('an unclosed CDATA section', i);
        } else if (text.startsWith('<!DOCTYPE', i)) {
          end = bareDoctypeEnd(text, i);
          if (end < 0) return { kind: 'doctype', at: i };
        } else {
          return malformed('a <! declaration that is neither a comment, a CDATA section nor a DOCTYPE', i);
        }
      } else if (c === 0x3f /* ? */) {
        end = endOf(text, '?>', i + 2);
        if (end < 0) return malformed('an unclosed processing instruction', i);
        // The parser skips quoted text first (and would read what follows as markup).
        if (endOutsideQuotes(text, i + 1, piEnds, markupQuotes) !== end - 1)
          return malformed('a processing instruction the parser would end elsewhere', i);
      } else {
        end = endOutsideQuotes(text, i + 1, tagEnds, markupQuotes);
        if (end < 0) return malformed('an unclosed start tag or attribute value', i);
        const attributes = attributesOf(text, i, end, valueQuotes, equals);
        if (attributes > MAX_XML_ATTRIBUTES) return limit('attributes');
        if ((nodes += attributes) > budget) return limit('nodes');
        if (text.charCodeAt(end - 1) !== 0x2f /* / */ && ++depth > MAX_DEPTH) return limit('depth');
      }
    }
    i = text.indexOf('<', end + 1);
  }
  return undefined;
}

function limit(excess: 'depth' | 'nodes' | 'attributes'): XmlVerdict {
  return { kind: 'limit', excess };
}

function malformed(what: string, at: number): XmlVerdict {
  return { kind: 'malformed', what, at };
}

/** Index of the last character of `end` found from `from`, or -1. */
function endOf(text: string, end: string, from: number): number {
  const at = text.indexOf(end, from);
  return at < 0 ? -1 : at + end.length - 1;
}

const isQuote = (c: number): boolean => c === 0x22 /* " */ || c === 0x27; /* ' */

/**
 * The next index of `s` at or after `from`, for `from`s that never decrease: each stretch of the
 * text is searched once, however often the answer is asked for (text.length: none left).
 */
type Finder = (from: number) => number;

function finder(text: string, s: string): Finder {
  let at = -1;
  return (from) => {
    if (at < from) {
      const found = text.indexOf(s, from);
      at = found < 0 ? text.length : found;
    }
    return at;
  };
}

/** The next `"` and `'`, the parser's two quotes. */
interface Quotes {
  double: Finder;
  single: Finder;
}

function quotes(text: string): Quotes {
  return { double: finder(text, '"'), single: finder(text, "'") };
}

/**
 * From `from`, the first `stop` outside quoted text (a quote runs to the next of the same kind),
 * as the parser ends a start tag at `>` or a processing instruction at `?>`; -1 when a quote or
 * the text ends first.
 */
function endOutsideQuotes(text: string, from: number, stop: Finder, q: Quotes): number {
  for (let j = from; ;) {
    const at = stop(j);
    const dq = q.double(j);
    const sq = q.single(j);
    const quote = Math.min(dq, sq);
    if (at < quote) return at;
    if (quote >= text.length) return -1;
    const close = quote === dq ? q.double(quote + 1) : q.single(quote + 1);
    if (close >= text.length) return -1;
    j = close + 1;
  }
}

/**
 * The attributes fast-xml-parser builds for the start tag from `<` at `i` to `>` at `end`: the
 * matches of its pattern `([^\s=]+)\s*(=\s*("[^"]*"|'[^']*'))?` that have a value, over the text
 * after the tag name's first whitespace. A match's `=` is one that follows a name (whitespace
 * between), outside any value matched before it; its value must close inside the tag, or the
 * quote starts the next name. Emulated, not matched: from `=` to `=`, forward only.
 */
function attributesOf(text: string, i: number, end: number, q: Quotes, equals: Finder): number {
  let k = i + 1;
  if (equals(k) >= end) return 0;
  while (k < end && !isSpace(text.charCodeAt(k))) k++;
  let count = 0;
  for (;;) {
    const eq = equals(k);
    if (eq >= end) return count;
    let p = eq - 1;
    while (p >= k && isSpace(text.charCodeAt(p))) p--;
    let v = eq + 1;
    while (v < end && isSpace(text.charCodeAt(v))) v++;
    const c = text.charCodeAt(v);
    const named = p >= k && text.charCodeAt(p) !== 0x3d; /* = */
    const close =
      named && v < end ? (c === 0x22 ? q.double(v + 1) : c === 0x27 ? q.single(v + 1) : end) : end;
    if (close < end) {
      // Past the limit the exact count no longer matters.
      if (++count > MAX_XML_ATTRIBUTES) return count;
      k = close + 1;
    } else {
      k = eq + 1;
    }
  }
}

/** XML's own whitespace (S). */
const isXmlSpace = (c: number): boolean => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;

/** The `>` of a bare `<!DOCTYPE name>` at `i` (whitespace around the name allowed), or -1. */
function bareDoctypeEnd(text: string, i: number): number {
  let j = i + '<!DOCTYPE'.length;
  const afterKeyword = j;
  while (isXmlSpace(text.charCodeAt(j))) j++;
  if (j === afterKeyword) return -1;
  const name = j;
  for (; j < text.length; j++) {
    const c = text.charCodeAt(j);
    if (isXmlSpace(c) || c === 0x3e /* > */) break;
    if (isQuote(c) || c === 0x5b /* [ */ || c === 0x3c /* < */) return -1;
  }
  if (j === name) return -1;
  while (isXmlSpace(text.charCodeAt(j))) j++;
  return text.charCodeAt(j) === 0x3e ? j : -1;
}
