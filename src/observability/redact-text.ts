// The last line of defence against credentials in logs and error texts: structured redaction
// (pino `redact`) only covers keys it knows about, so secrets embedded in messages, URLs or
// deeply nested objects are scrubbed from the final text as well.
//
// The text scrubbed may hold anything an upstream sent, so every pass here is a single forward
// scan (or a regular expression of plain literals): its cost grows with the length of the text,
// never with its square, whatever the text is made of.

import { isSpace } from '../core/bounded-text.js';
export const REDACTED = '<redacted>';

/**
 * Names of settings, options and query parameters that hold a credential: any name containing one
 * of these (lower-cased, with `-`, `_`, `.` and the like removed): `password`, `db_pass`,
 * `client_secret`, `access_token`, `x-api-key`, `private_key`, `oauth_signature`…
 */
const CREDENTIAL_NAME_PARTS = [
  'pass',
  'pwd',
  'secret',
  'token',
  'apikey',
  'credential',
  'privatekey',
  'signature',
];
/** Short query parameter names that carry a credential by convention (`?key=`, `?sig=`, `?auth=`). */
const CREDENTIAL_PARAMS = new Set(['key', 'sig', 'auth', 'pw']);

/** Whether a setting or option named `name` holds a credential (see CREDENTIAL_NAME_PARTS). */
export function isCredentialName(name: string): boolean {
  const plain = alphanumeric(name);
  return CREDENTIAL_NAME_PARTS.some((part) => plain.includes(part));
}

/** Whether a URL query parameter named `name` carries a credential. */
export function isCredentialParam(name: string): boolean {
  return isCredentialName(name) || CREDENTIAL_PARAMS.has(alphanumeric(name));
}

function alphanumeric(name: string): string {
  let out = '';
  for (const ch of name.toLowerCase()) if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9')) out += ch;
  return out;
}

/**
 * Credentials written into URLs anywhere in `text`: `scheme://user:pass@host` →
 * `scheme://<redacted>@host`, and the value of every credential-like query parameter
 * (`?password=…`, `&token=…`, `?sig=…`) → `<redacted>`. The userinfo may not contain `/`, `@` or
 * whitespace; quotes, `<`, `>` and backslashes end it too, because the text is often a serialized
 * JSON line. One forward scan.
 */
export function redactUrlCredentials(text: string): string {
  const n = text.length;
  let out = '';
  let copied = 0;
  let i = 0;
  while (i < n) {
    const c = text.charCodeAt(i);
    if (c === COLON && text.startsWith('//', i + 1)) {
      const start = i + 3;
      let j = start;
      while (j < n && !endsUserinfo(text.charCodeAt(j))) j++;
      if (j > start && j < n && text.charCodeAt(j) === AT && hasScheme(text, i)) {
        out += text.slice(copied, start) + REDACTED;
        copied = j;
      }
      // Nothing in text[start, j) can begin another URL or a parameter: go on from its end.
      i = j;
    } else if (c === QUESTION || c === AMPERSAND) {
      let j = i + 1;
      while (j < n && isParamNameChar(text.charCodeAt(j))) j++;
      if (j > i + 1 && j < n && text.charCodeAt(j) === EQUALS && isCredentialParam(text.slice(i + 1, j))) {
        let k = j + 1;
        while (k < n && !endsParamValue(text.charCodeAt(k))) k++;
        if (k > j + 1) {
          out += text.slice(copied, j + 1) + REDACTED;
          copied = k;
        }
        i = k;
      } else i = j;
    } else i++;
  }
  return copied === 0 ? text : out + text.slice(copied);
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

export interface TextRedactor {
  (text: string): string;
  /**
   * The longest text one secret may take (in any of its forms): a text cut at some point, then
   * scrubbed, shows no part of a secret before `cut point - reach` (see logger.ts).
   */
  readonly reach: number;
}

/**
 * Builds a scrubber that replaces every occurrence of each secret (raw, and as it appears once
 * JSON-escaped, since log lines are JSON, or percent-encoded) and every credential in a URL with
 * `<redacted>`.
 */
export function createTextRedactor(secrets: readonly string[]): TextRedactor {
  const forms = new Set<string>();
  for (const secret of secrets) {
    // Very short values ("a", "1") would shred unrelated text; config validation is where a
    // too-short secret should be rejected, not here.
    if (typeof secret !== 'string' || secret.length < 3) continue;
    forms.add(secret);
    forms.add(JSON.stringify(secret).slice(1, -1));
    forms.add(encodeURIComponent(secret));
  }
  // Longest first so a secret containing another one is replaced whole. Plain literals only: at
  // each position the engine compares each form once, so the cost is linear in the text.
  const alternatives = [...forms].sort((a, b) => b.length - a.length).map(escapeRegExp);
  const secretPattern = alternatives.length > 0 ? new RegExp(alternatives.join('|'), 'g') : undefined;
  const scrub = (text: string): string => {
    const scrubbed = secretPattern ? text.replace(secretPattern, REDACTED) : text;
    return redactUrlCredentials(scrubbed);
  };
  return Object.assign(scrub, { reach: Math.max(0, ...[...forms].map((f) => f.length)) });
}

const COLON = 0x3a;
const AT = 0x40;
const QUESTION = 0x3f;
const AMPERSAND = 0x26;
const EQUALS = 0x3d;

/** `[\s/?#@"'\\<>]` */
function endsUserinfo(c: number): boolean {
  return (
    c === 0x2f ||
    c === QUESTION ||
    c === 0x23 ||
    c === AT ||
    c === 0x22 ||
    c === 0x27 ||
    c === 0x5c ||
    c === 0x3c ||
    c === 0x3e ||
    isSpace(c)
  );
}

/** `[&#\s"'\\<>]` */
function endsParamValue(c: number): boolean {
  return (
    c === AMPERSAND ||
    c === 0x23 ||
    c === 0x22 ||
    c === 0x27 ||
    c === 0x5c ||
    c === 0x3c ||
    c === 0x3e ||
    isSpace(c)
  );
}

const isLetter = (c: number) => (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
const isDigit = (c: number) => c >= 0x30 && c <= 0x39;
/** `[a-z0-9+.-]`, case-insensitive. */
const isSchemeChar = (c: number) => isLetter(c) || isDigit(c) || c === 0x2b || c === 0x2e || c === 0x2d;
/** `\w`. */
const isWordChar = (c: number) => isLetter(c) || isDigit(c) || c === 0x5f;
/** `[A-Za-z0-9_.-]` */
const isParamNameChar = (c: number) => isWordChar(c) || c === 0x2e || c === 0x2d;

/**
 * Whether a scheme ends at `colon` (the `:` of `://`): the characters before it that a scheme may
 * hold include a letter that starts a word (`\b[a-z][a-z0-9+.-]*` ends there).
 */
function hasScheme(text: string, colon: number): boolean {
  let s = colon;
  while (s > 0 && isSchemeChar(text.charCodeAt(s - 1))) s--;
  for (let p = s; p < colon; p++) {
    if (isLetter(text.charCodeAt(p)) && (p === 0 || !isWordChar(text.charCodeAt(p - 1)))) return true;
  }
  return false;
}
