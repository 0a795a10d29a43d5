// The last line of defence against credentials in logs and error texts: structured redaction
// (pino `redact`) only covers keys it knows about, so secrets embedded in messages, URLs or
// deeply nested objects are scrubbed from the final text as well.

export const REDACTED = '<redacted>';

// scheme://user:pass@host → scheme://<redacted>@host. The userinfo may not contain '/', '@' or
// whitespace; quotes and backslashes end it too, because the text is often a serialized JSON line.
const URL_USERINFO = /\b([a-z][a-z0-9+.-]*:\/\/)[^\s/?#@"'\\<>]+@/gi;

export function redactUrlUserinfo(text: string): string {
  return text.replace(URL_USERINFO, `$1${REDACTED}@`);
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/**
 * Builds a scrubber that replaces every occurrence of each secret (raw, and as it appears once
 * JSON-escaped, since log lines are JSON) and every URL userinfo with `<redacted>`.
 */
export function createTextRedactor(secrets: readonly string[]): (text: string) => string {
  const forms = new Set<string>();
  for (const secret of secrets) {
    // Very short values ("a", "1") would shred unrelated text; config validation is where a
    // too-short secret should be rejected, not here.
    if (typeof secret !== 'string' || secret.length < 3) continue;
    forms.add(secret);
    forms.add(JSON.stringify(secret).slice(1, -1));
    forms.add(encodeURIComponent(secret));
  }
  // Longest first so a secret containing another one is replaced whole.
  const alternatives = [...forms].sort((a, b) => b.length - a.length).map(escapeRegExp);
  const secretPattern = alternatives.length > 0 ? new RegExp(alternatives.join('|'), 'g') : undefined;
  return (text: string): string => {
    const scrubbed = secretPattern ? text.replace(secretPattern, REDACTED) : text;
    return redactUrlUserinfo(scrubbed);
  };
}
