// The whole dialect space of docs/dialects.md as generators: a model of a resource or collection,
// its normalized shape (computed from the model alone), and renderings in XML and JSON that pick,
// per element, among the forms the specs allow (J1–J7, X1–X8). Written from the specs' conventions,
// independently of the sandbox's writer and of the decoder.
import fc from 'fast-check';
import type { Json } from '../../../src/core/resource.js';
import { normalizeDateTime } from '../../../src/upstream/datetime.js';

export type Val =
  | { k: 'str'; v: string }
  | { k: 'int'; v: number }
  | { k: 'float'; v: number }
  | { k: 'bool'; v: boolean }
  | { k: 'null' }
  /** An instant (ms since the epoch) and the offset, in minutes, the server writes it in. */
  | { k: 'datetime'; ms: number; offset: number }
  | { k: 'list'; items: Val[] }
  | { k: 'res'; r: Res };

export interface Link {
  rel: string;
  href: string;
  embed?: Res;
}

export interface Res {
  type: string;
  fields: [string, Val][];
  links: Link[];
}

export interface Coll {
  items: Res[];
  total?: number;
  next?: string;
  prev?: string;
}

export type Model = { kind: 'res'; r: Res } | { kind: 'coll'; c: Coll };

// ---------------------------------------------------------------- generators

const WORDS = ['job', 'due', 'tag', 'x', 'list', 'name', 'status', 'deadline', 'area', 'q', 'put', 'up'];
const nameArb = fc
  .array(fc.constantFrom(...WORDS), { minLength: 1, maxLength: 3 })
  .map((parts) => parts.join('_'));

const SPECIAL = [
  ' ',
  '  ',
  '\t',
  '\n',
  '\r\n',
  '&',
  '<',
  '>',
  '"',
  "'",
  ']]>',
  '&amp;',
  '&nbsp;',
  '&#233;',
  'é',
  'Ü',
  '☺',
  '𝄞',
  '\u00a0',
  '2026-11-20T10:15:02Z',
  '007',
  'true',
  'null',
  '<![CDATA[',
  '{"a":1}',
];
// eslint-disable-next-line no-control-regex -- these are exactly the characters XML 1.0 cannot carry
const XML_ILLEGAL = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]/;

/** Any text XML 1.0 can carry, except whole strings JSON would read as datetimes (J4). */
export const textArb = fc
  .array(
    fc.oneof(
      fc.constantFrom(...SPECIAL),
      fc.string({ unit: 'grapheme', maxLength: 6 }),
      fc.string({ maxLength: 8 }),
    ),
    { maxLength: 5 },
  )
  .map((parts) => parts.join(''))
  .filter((s) => !XML_ILLEGAL.test(s) && normalizeDateTime(s) === undefined);

const OFFSETS = [0, 60, -60, -300, 330, -570, 840, -720, 45, 0];
const datetimeArb = fc.record({
  k: fc.constant('datetime' as const),
  // 1970 … 2100, with whole-second and whole-minute instants common (they render shorter).
  ms: fc.oneof(
    fc.integer({ min: 0, max: 4_102_444_800_000 }),
    fc.integer({ min: 0, max: 4_102_444_800 }).map((s) => s * 1000),
    fc.integer({ min: 0, max: 68_374_080 }).map((m) => m * 60_000),
  ),
  offset: fc.constantFrom(...OFFSETS),
});

const scalarArb: fc.Arbitrary<Val> = fc.oneof(
  textArb.map((v) => ({ k: 'str' as const, v })),
  fc.maxSafeInteger().map((v) => ({ k: 'int' as const, v })),
  fc
    .double({ noNaN: true, noDefaultInfinity: true })
    .filter((v) => !Object.is(v, -0))
    .map((v) => ({ k: 'float' as const, v })),
  fc.boolean().map((v) => ({ k: 'bool' as const, v })),
  fc.constant({ k: 'null' as const }),
  datetimeArb,
);

const hrefArb = fc
  .tuple(fc.webUrl({ withQueryParameters: true }), fc.constantFrom('', '?a=1&b=2', '&c=%20"q"'))
  .map(([u, q]) => u + q);

/** A value, nesting lists and resources at most `depth` levels deeper. */
function valArb(depth: number): fc.Arbitrary<Val> {
  if (depth <= 0) return scalarArb;
  return fc.oneof(
    { weight: 4, arbitrary: scalarArb },
    {
      weight: 1,
      arbitrary: fc.array(valArb(depth - 1), { maxLength: 4 }).map((items): Val => ({ k: 'list', items })),
    },
    { weight: 1, arbitrary: nestedArb(depth - 1).map((r): Val => ({ k: 'res', r })) },
  );
}

/** A resource inside a field or a list: never empty (an empty element is XML's empty string). */
function nestedArb(depth: number): fc.Arbitrary<Res> {
  return resArb(depth).filter((r) => r.fields.length + r.links.length > 0);
}

const resArbs = new Map<number, fc.Arbitrary<Res>>();

function resArb(depth: number): fc.Arbitrary<Res> {
  const cached = resArbs.get(depth);
  if (cached) return cached;
  const member = fc.tuple(
    fc.constantFrom('field', 'field', 'field', 'link', 'embed'),
    valArb(depth),
    hrefArb,
    depth > 0 ? fc.option(resArb(depth - 1), { nil: undefined }) : fc.constant(undefined),
  );
  const arb = fc
    .tuple(
      fc.oneof(nameArb, fc.constant('subject')),
      // Members are generated only for the names drawn: a fixed count would grow exponentially.
      fc
        .uniqueArray(nameArb, { maxLength: 5 })
        .chain((names) =>
          fc.tuple(
            fc.constant(names),
            fc.array(member, { minLength: names.length, maxLength: names.length }),
          ),
        ),
    )
    .map(([type, [names, members]]): Res => {
      const r: Res = { type, fields: [], links: [] };
      names.forEach((name, i) => {
        const [kind, v, href, embed] = members[i]!;
        if (kind === 'field') {
          // XML names a nested resource by its element, i.e. by the field.
          r.fields.push([name, v.k === 'res' ? { k: 'res', r: { ...v.r, type: name } } : v]);
        } else r.links.push({ rel: name, href, embed: kind === 'embed' ? embed : undefined });
      });
      return r;
    });
  resArbs.set(depth, arb);
  return arb;
}

const DEPTH = 3;

export const modelArb: fc.Arbitrary<Model> = fc.oneof(
  resArb(DEPTH).map((r): Model => ({ kind: 'res', r })),
  fc
    .record(
      {
        items: fc.array(resArb(DEPTH - 1), { maxLength: 4 }),
        total: fc.nat({ max: 100_000 }),
        next: hrefArb,
        prev: hrefArb,
      },
      { requiredKeys: ['items'] },
    )
    .map((c): Model => ({ kind: 'coll', c })),
);

// ---------------------------------------------------------------- the normalized shape

export function expected(m: Model): Json {
  if (m.kind === 'res') return expectedRes(m.r);
  const out: { [k: string]: Json } = { entries: m.c.items.map(expectedRes) };
  if (m.c.total !== undefined) out.total_entries = m.c.total;
  if (m.c.next !== undefined) out.next_link = m.c.next;
  if (m.c.prev !== undefined) out.prev_link = m.c.prev;
  return out;
}

function expectedRes(r: Res): Json {
  const out: { [k: string]: Json } = { resource_type: r.type };
  for (const [name, v] of r.fields) out[name] = expectedVal(v);
  for (const l of r.links) {
    out[`${l.rel}_link`] = l.href;
    if (l.embed) out[l.rel] = expectedRes(l.embed);
  }
  return out;
}

function expectedVal(v: Val): Json {
  switch (v.k) {
    case 'str':
    case 'int':
    case 'float':
    case 'bool':
      return v.v;
    case 'null':
      return null;
    case 'datetime':
      return new Date(v.ms).toISOString();
    case 'list':
      return { entries: v.items.map(expectedVal) };
    case 'res':
      return expectedRes(v.r);
  }
}

// ---------------------------------------------------------------- rendering choices

/** Deterministic choices from a generated seed, so a failing case replays. */
export class Choices {
  private state: number;
  constructor(seed: number) {
    this.state = seed >>> 0 || 1;
  }
  /** An integer in [0, n). */
  int(n: number): number {
    // mulberry32
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (((t ^ (t >>> 14)) >>> 0) % n) as number;
  }
  pick<T>(options: readonly T[]): T {
    return options[this.int(options.length)]!;
  }
  chance(): boolean {
    return this.int(2) === 0;
  }
  shuffle<T>(xs: T[]): T[] {
    const a = [...xs];
    for (let i = a.length - 1; i > 0; i--) {
      const j = this.int(i + 1);
      [a[i], a[j]] = [a[j]!, a[i]!];
    }
    return a;
  }
}

const pad2 = (n: number) => String(n).padStart(2, '0');

/** J4: the instant in its offset, with or without seconds and fractions, in any zone notation. */
function renderDateTime(v: { ms: number; offset: number }, ch: Choices): string {
  const local = new Date(v.ms + v.offset * 60_000);
  const date = `${local.getUTCFullYear()}-${pad2(local.getUTCMonth() + 1)}-${pad2(local.getUTCDate())}`;
  const ms = local.getUTCMilliseconds();
  const sec = local.getUTCSeconds();
  let time = `${pad2(local.getUTCHours())}:${pad2(local.getUTCMinutes())}`;
  if (sec !== 0 || ms !== 0 || ch.chance()) time += `:${pad2(sec)}`;
  if (ms !== 0 || (time.length > 5 && ch.chance())) {
    const fraction = String(ms).padStart(3, '0');
    // Finer fractions than milliseconds are truncated by the decoder.
    time += `.${ch.pick([fraction, `${fraction}${ch.int(1000)}`, ms % 100 === 0 ? fraction.slice(0, 1) : fraction])}`;
  }
  const abs = Math.abs(v.offset);
  const sign = v.offset < 0 ? '-' : '+';
  const hh = pad2(Math.floor(abs / 60));
  const mm = pad2(abs % 60);
  const zones =
    v.offset === 0
      ? ['Z', '+00:00', '+0000', '-00:00']
      : [`${sign}${hh}:${mm}`, `${sign}${hh}${mm}`, ...(mm === '00' ? [`${sign}${hh}`] : [])];
  return `${date}T${time}${ch.pick(zones)}`;
}

// ---------------------------------------------------------------- JSON (J1–J7)

export function renderJson(m: Model, ch: Choices): string {
  const indent = ch.pick(['', '  ', '\t']);
  const body = m.kind === 'res' ? jsonRes(m.r, ch, indent, 0) : jsonColl(m.c, ch, indent);
  return (ch.int(4) === 0 ? '\ufeff' : '') + body;
}

function jsonObject(members: [string, string][], ch: Choices, indent: string, depth: number): string {
  const shuffled = ch.shuffle(members);
  if (indent === '') return `{${shuffled.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`;
  const inner = indent.repeat(depth + 1);
  const lines = shuffled.map(([k, v]) => `${inner}${JSON.stringify(k)}: ${v}`);
  return lines.length === 0 ? '{}' : `{\n${lines.join(',\n')}\n${indent.repeat(depth)}}`;
}

function jsonColl(c: Coll, ch: Choices, indent: string): string {
  const members: [string, string][] = [
    ['entries', `[${c.items.map((r) => jsonRes(r, ch, indent, 1)).join(',')}]`],
  ];
  // J1: with or without resource_type.
  if (ch.chance()) members.push(['resource_type', '"events"']);
  if (c.total !== undefined) members.push(['total_entries', String(c.total)]);
  if (c.next !== undefined) members.push(['next_link', JSON.stringify(c.next)]);
  if (c.prev !== undefined) members.push(['prev_link', JSON.stringify(c.prev)]);
  return jsonObject(members, ch, indent, 0);
}

function jsonRes(r: Res, ch: Choices, indent: string, depth: number): string {
  const members: [string, string][] = [['resource_type', JSON.stringify(r.type)]];
  for (const [name, v] of r.fields) members.push([name, jsonVal(v, name, ch, indent, depth + 1)]);
  for (const l of r.links) {
    members.push([`${l.rel}_link`, JSON.stringify(l.href)]);
    if (l.embed) members.push([l.rel, jsonRes(l.embed, ch, indent, depth + 1)]);
  }
  return jsonObject(members, ch, indent, depth);
}

function jsonVal(v: Val, name: string, ch: Choices, indent: string, depth: number): string {
  switch (v.k) {
    case 'str':
      return JSON.stringify(v.v);
    case 'int':
    case 'float':
      return JSON.stringify(v.v);
    case 'bool':
      return String(v.v);
    case 'null':
      return 'null';
    case 'datetime':
      return JSON.stringify(renderDateTime(v, ch));
    case 'list': {
      const items = `[${v.items.map((item) => jsonVal(item, 'item', ch, indent, depth + 1)).join(',')}]`;
      // J2: a bare array, the spec's collection object, or a labelled one.
      return ch.pick([
        items,
        `{"entries":${items}}`,
        `{"resource_type":${JSON.stringify(name)},"entries":${items}}`,
        `{"entries":${items},"resource_type":"list"}`,
      ]);
    }
    case 'res':
      return jsonRes(v.r, ch, indent, depth);
  }
}

// ---------------------------------------------------------------- XML (X1–X8)

export function renderXml(m: Model, ch: Choices): string {
  const decl = ch.pick([
    '',
    '<?xml version="1.0" encoding="UTF-8"?>\n',
    "<?xml version='1.0'?>",
    '<?xml version="1.0" encoding="utf-8" standalone="yes"?>\r\n',
  ]);
  const comment = ch.int(5) === 0 ? '<!-- generated -->\n' : '';
  const ws = ch.pick(['', '\n', '\r\n', ' ']);
  const root = m.kind === 'res' ? xmlRes(m.r, m.r.type, ch, 0) : xmlColl(m.c, ch);
  return (ch.int(4) === 0 ? '\ufeff' : '') + decl + comment + root + ws;
}

const tagOf = (name: string) => name.replace(/_/g, '-');

function attrs(pairs: [string, string][], ch: Choices): string {
  return ch
    .shuffle(pairs)
    .map(([k, v]) => {
      const q = ch.pick(['"', "'"]);
      return ` ${k}=${q}${escapeAttr(v, q, ch)}${q}`;
    })
    .join('');
}

function escapeAttr(s: string, quote: string, ch: Choices): string {
  return [...s]
    .map((c) => {
      if (c === '&') return '&amp;';
      if (c === '<') return '&lt;';
      if (c === quote) return quote === '"' ? '&quot;' : '&apos;';
      if (c === '\t' || c === '\n' || c === '\r') return `&#${c.charCodeAt(0)};`;
      if (c === '>' || c === '"' || c === "'")
        return ch.int(3) === 0
          ? ({ '>': '&gt;', '"': '&quot;', "'": '&apos;' } as Record<string, string>)[c]!
          : c;
      return c;
    })
    .join('');
}

/** X1: text as entities, character references or CDATA; only \r must always be a reference. */
function escapeText(s: string, ch: Choices): string {
  if (s !== '' && !s.includes('\r') && ch.int(3) === 0) {
    return `<![CDATA[${s.replace(/]]>/g, ']]]]><![CDATA[>')}]]>`;
  }
  let out = '';
  const chars = [...s];
  chars.forEach((c, i) => {
    const code = c.codePointAt(0)!;
    if (c === '&') out += '&amp;';
    else if (c === '<') out += '&lt;';
    else if (c === '\r') out += '&#13;';
    else if (c === '>')
      out += i >= 2 && chars[i - 1] === ']' && chars[i - 2] === ']' ? '&gt;' : ch.pick(['>', '&gt;']);
    else if (c === '"') out += ch.pick(['"', '&quot;']);
    else if (c === "'") out += ch.pick(["'", '&apos;']);
    else if (code > 127 && ch.int(3) === 0)
      out += ch.chance() ? `&#${code};` : `&#x${code.toString(16).toUpperCase()};`;
    else out += c;
  });
  return out;
}

function pad(ch: Choices, depth: number): string {
  return ch.pick(['', '\n' + '  '.repeat(depth), ' ', '\r\n\t']);
}

function element(
  tag: string,
  attributes: [string, string][],
  children: string[],
  ch: Choices,
  depth: number,
): string {
  const open = `<${tag}${attrs(attributes, ch)}`;
  if (children.length === 0)
    return ch.pick([`${open}/>`, `${open} />`, `${open}></${tag}>`, `${open}>${pad(ch, depth)}</${tag}>`]);
  return `${open}>${children.map((c) => pad(ch, depth + 1) + c).join('')}${pad(ch, depth)}</${tag}>`;
}

function xmlColl(c: Coll, ch: Choices): string {
  const children = c.items.map((r) => xmlRes(r, r.type, ch, 1));
  if (c.total !== undefined)
    children.push(`<total-entries${attrs([['type', 'integer']], ch)}>${c.total}</total-entries>`);
  if (c.next !== undefined) children.push(xmlLink('next', c.next, undefined, ch, 1));
  if (c.prev !== undefined) children.push(xmlLink('prev', c.prev, undefined, ch, 1));
  // Entries keep their order; pagination may come anywhere among them.
  const entries = children.slice(0, c.items.length);
  for (const extra of children.slice(c.items.length)) entries.splice(ch.int(entries.length + 1), 0, extra);
  return element('events', [['type', 'array']], entries, ch, 0);
}

function xmlLink(rel: string, href: string, embed: Res | undefined, ch: Choices, depth: number): string {
  // The decoder snake_cases rels, so a server may hyphenate them.
  const relText = ch.chance() ? rel : tagOf(rel);
  const children = embed ? [xmlRes(embed, embed.type, ch, depth + 1)] : [];
  return element(
    'link',
    [
      ['rel', relText],
      ['href', href],
    ],
    children,
    ch,
    depth,
  );
}

function xmlRes(r: Res, name: string, ch: Choices, depth: number): string {
  const children = [
    ...r.fields.map(([field, v]) => xmlVal(v, field, ch, depth + 1)),
    ...r.links.map((l) => xmlLink(l.rel, l.href, l.embed, ch, depth + 1)),
  ];
  return element(tagOf(name), [], ch.shuffle(children), ch, depth);
}

function typed(tag: string, type: string, text: string, ch: Choices): string {
  const t = tagOf(tag);
  const spaced = ch.int(4) === 0 ? ` ${text}\n` : text;
  return `<${t}${attrs([['type', type]], ch)}>${spaced}</${t}>`;
}

function xmlVal(v: Val, name: string, ch: Choices, depth: number): string {
  const t = tagOf(name);
  switch (v.k) {
    case 'str':
      if (v.v === '') return ch.pick([`<${t}/>`, `<${t}></${t}>`]);
      return `<${t}>${escapeText(v.v, ch)}</${t}>`;
    case 'int': {
      const text = v.v >= 0 && ch.int(4) === 0 ? ch.pick([`+${v.v}`, `00${v.v}`]) : String(v.v);
      return typed(name, 'integer', text, ch);
    }
    case 'float':
      return typed(name, 'float', String(v.v), ch);
    case 'bool':
      return typed(name, 'boolean', String(v.v), ch);
    case 'null': {
      const extra: [string, string][] = ch.chance()
        ? [['type', ch.pick(['integer', 'datetime', 'string'])]]
        : [];
      return element(t, [['nil', 'true'], ...extra], [], ch, depth);
    }
    case 'datetime':
      return typed(name, 'datetime', renderDateTime(v, ch), ch);
    case 'list':
      return element(
        t,
        [['type', 'array']],
        v.items.map((item) =>
          xmlVal(item, item.k === 'res' ? item.r.type : ch.pick(['item', 'value', 'tag']), ch, depth + 1),
        ),
        ch,
        depth,
      );
    case 'res':
      return xmlRes(v.r, name, ch, depth);
  }
}
