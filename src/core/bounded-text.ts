// Upstream text shown in an error or a log line: cut to a bounded length first, so no later step
// (scrubbing, serializing, a log shipper) ever sees more than a few hundred characters of it,
// whatever an upstream sends as an event type, an id, a link or an element name.

/** How much of one upstream value an error message or a log line shows. */
export const MAX_SHOWN_CHARS = 300;
/**
 * A text at most this much over the bound is left whole: cutting it would save little, and a text
 * already cut (its note included) is not cut again when it is quoted in another message.
 */
const SLACK = 64;

/**
 * `text` if it is at most `max` (+ SLACK) characters, else its first `max` characters (never half a
 * surrogate pair) and a note of how much was left out. A URL authority cut before its end loses
 * what it kept of it (`https://…`): the part after the cut may have been the `@` that made it
 * userinfo, and half a credential must not be shown either. `omitted`: characters already taken
 * off the end of `text` by the caller (it is then cut in any case, and they count in the note).
 */
export function cut(text: string, max = MAX_SHOWN_CHARS, omitted = 0): string {
  if (omitted === 0 && text.length <= max + SLACK) return text;
  let end = Math.min(max, text.length);
  const last = text.charCodeAt(end - 1);
  if (end < text.length && last >= 0xd800 && last <= 0xdbff) end--;
  const continues = end < text.length ? !endsAuthority(text.charCodeAt(end)) : omitted > 0;
  if (continues) end = openAuthorityStart(text, end) ?? end;
  return `${text.slice(0, end)}…[${text.length - end + omitted} more characters]`;
}

/**
 * A value of any JSON type from upstream, for an error message: strings cut and quoted, numbers
 * and literals as they are, objects and lists named, never serialized whole.
 */
export function quote(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(cut(value));
  if (value === null || typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (value === undefined) return 'nothing';
  if (Array.isArray(value)) return 'a list';
  return typeof value === 'object' ? 'an object' : typeof value;
}

/** Characters that end a URL authority (or the text holding it). */
function endsAuthority(code: number): boolean {
  // / ? # @ whitespace " ' \ < >
  return (
    code === 0x2f ||
    code === 0x3f ||
    code === 0x23 ||
    code === 0x40 ||
    code <= 0x20 ||
    code === 0x22 ||
    code === 0x27 ||
    code === 0x5c ||
    code === 0x3c ||
    code === 0x3e
  );
}

/**
 * Where to cut instead of `end` when `text[0, end)` ends inside the authority of a `scheme://`
 * (after the `//`, with no character that ends an authority since), the text going on with
 * authority characters: the position right after the `//`. Looks back at most one authority.
 */
function openAuthorityStart(text: string, end: number): number | undefined {
  let i = end;
  while (i > 0 && !endsAuthority(text.charCodeAt(i - 1))) i--;
  // text[i, end) is the run of authority characters the cut falls in; it must follow "://".
  return i >= 3 && text.startsWith('://', i - 3) ? i : undefined;
}

/** What JavaScript's `\s` matches, for the scanners that read upstream text without a pattern. */
export function isSpace(c: number): boolean {
  return (
    (c >= 0x09 && c <= 0x0d) ||
    c === 0x20 ||
    c === 0xa0 ||
    c === 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0x202f ||
    c === 0x205f ||
    c === 0x3000 ||
    c === 0xfeff
  );
}
