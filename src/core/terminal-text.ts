// Text for a terminal. Upstream text (event types, error messages quoting a feed, dead letters)
// may hold control characters: ESC and CSI sequences that move the cursor, rewrite lines, set the
// window title or the clipboard, and bidirectional overrides that make a line read otherwise than
// it is. Shown to a human, each is written as a visible escape (`\x1b`, `\u202e`) instead.

/**
 * C0 controls, DEL, C1 controls (U+009B is a one-character CSI), the bidirectional marks,
 * embeddings, overrides and isolates, and the Unicode line and paragraph separators.
 */
function isUnsafe(c: number): boolean {
  if (c < 0x20 || (c >= 0x7f && c <= 0x9f)) return true;
  if (c < 0x61c) return false;
  return (
    c === 0x61c ||
    c === 0x200e ||
    c === 0x200f ||
    (c >= 0x202a && c <= 0x202e) ||
    (c >= 0x2066 && c <= 0x2069) ||
    c === 0x2028 ||
    c === 0x2029
  );
}

const hex = (c: number, digits: number) => c.toString(16).padStart(digits, '0');

/** The escapes of the controls below U+00A0, made once: `\n`, `\r`, `\t`, else `\xNN`. */
const SHORT = Array.from({ length: 0xa0 }, (_, c) =>
  c === 0x0a ? '\\n' : c === 0x0d ? '\\r' : c === 0x09 ? '\\t' : `\\x${hex(c, 2)}`,
);

/** The same as `\u00NN` escapes, for JSON. */
const JSON_SHORT = Array.from({ length: 0xa0 }, (_, c) => `\\u${hex(c, 4)}`);

/** Copies `text`, writing each unsafe character (that `keep` does not keep) as `escape(c)`. One pass. */
function escapeUnsafe(text: string, escape: (c: number) => string, keep?: (c: number) => boolean): string {
  let out = '';
  let copied = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (!isUnsafe(c) || keep?.(c)) continue;
    out += text.slice(copied, i) + escape(c);
    copied = i + 1;
  }
  return copied === 0 ? text : out + text.slice(copied);
}

/**
 * `text` with every character a terminal would act on written as an escape. One field of a line:
 * line feeds are escaped too, unless `newlines` (a message whose lines are its own).
 */
export function terminalSafe(text: string, opts: { newlines?: boolean } = {}): string {
  return escapeUnsafe(
    text,
    (c) => SHORT[c] ?? `\\u${hex(c, 4)}`,
    opts.newlines ? (c) => c === 0x0a : undefined,
  );
}

/**
 * JSON for a terminal: JSON.stringify escapes C0 controls but writes DEL, C1 controls and
 * bidirectional overrides raw; these become `\u` escapes too. Still valid JSON, parsing to the same
 * value.
 */
export function terminalJson(value: unknown, space?: number): string {
  // C0 controls left in JSON text are its own line breaks and indentation: kept.
  return escapeUnsafe(
    JSON.stringify(value, null, space),
    (c) => JSON_SHORT[c] ?? `\\u${hex(c, 4)}`,
    (c) => c < 0x20,
  );
}
