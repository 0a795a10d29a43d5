// Secrets out of printed configs and logs. `redactConfig` is for showing a config
// (check-config, start-up logs); `collectSecrets` feeds the logger's value-based redaction.
import { multiHostKind, parseMultiHostUrl } from '../queue/bullmq/redis-multi-host.js';
import type { FeedsyncConfig } from './types.js';

export const REDACTED = '<redacted>';

// Module sinks take free-form options; keys that look like credentials are treated as secrets
// because nothing else knows what a user's sink keeps there.
const SECRET_OPTION_KEY = /pass(word)?|secret|token|api[_-]?key|credential|private[_-]?key/i;

/** A deep copy of `config` with every secret replaced by `"<redacted>"`. */
export function redactConfig(config: FeedsyncConfig): unknown {
  const copy = structuredClone(config);
  for (const source of copy.sources) {
    source.password = REDACTED;
    if (source.proxy !== undefined) source.proxy = redactUrlPassword(source.proxy);
  }
  if (copy.queue.redis_url !== undefined) copy.queue.redis_url = redactUrlPassword(copy.queue.redis_url);
  if (copy.queue.redis_sentinel_password !== undefined) copy.queue.redis_sentinel_password = REDACTED;
  for (const sink of copy.sinks) {
    if (sink.type === 'webhook') {
      if (sink.secret !== undefined) sink.secret = REDACTED;
      sink.url = redactUrlPassword(sink.url);
    } else if (sink.type === 'postgres') {
      sink.url = redactPostgresUrl(sink.url);
    } else if (sink.type === 'module') {
      sink.options = redactOptions(sink.options) as Record<string, unknown>;
    }
  }
  return copy;
}

/** Every secret value in `config` (raw and URL-decoded forms), without duplicates or empties. */
export function collectSecrets(config: FeedsyncConfig): string[] {
  const found = new Set<string>();
  for (const source of config.sources) {
    found.add(source.password);
    if (source.proxy !== undefined) urlPasswords(source.proxy).forEach((p) => found.add(p));
  }
  if (config.queue.redis_url !== undefined) urlPasswords(config.queue.redis_url).forEach((p) => found.add(p));
  if (config.queue.redis_sentinel_password !== undefined) found.add(config.queue.redis_sentinel_password);
  for (const sink of config.sinks) {
    if (sink.type === 'webhook') {
      if (sink.secret !== undefined) found.add(sink.secret);
      urlPasswords(sink.url).forEach((p) => found.add(p));
    } else if (sink.type === 'postgres') {
      postgresUrlPasswords(sink.url).forEach((p) => found.add(p));
    } else if (sink.type === 'module') {
      collectOptionSecrets(sink.options, found);
    }
  }
  found.delete('');
  return [...found];
}

/**
 * `redis://user:pw@host:6379/0` → `redis://user:<redacted>@host:6379/0`. Done on the text, not
 * via URL setters, so `<redacted>` stays readable instead of being percent-encoded. A string that
 * does not parse as a URL is redacted whole: it cannot be shown safely.
 */
export function redactUrlPassword(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return REDACTED;
  }
  if (url.password === '') return value;
  // The userinfo ends at the LAST `@` of the authority (a password may hold an encoded one).
  const start = value.indexOf('//') + 2;
  const end = value.slice(start).search(/[/?#\\]/);
  const authorityEnd = end < 0 ? value.length : start + end;
  const at = value.lastIndexOf('@', authorityEnd - 1);
  const colon = value.indexOf(':', start);
  if (start < 2 || at < start || colon < 0 || colon > at) return REDACTED;
  const redacted = `${value.slice(0, colon + 1)}${REDACTED}${value.slice(at)}`;
  // Belt and braces for odd inputs the URL parser normalises (tabs, backslashes): never leak.
  return urlPasswords(value).some((p) => redacted.includes(p)) ? REDACTED : redacted;
}

/**
 * A PostgreSQL URL carries its password in the userinfo or as a `password` parameter (libpq and
 * pg read both): both redacted. A value that does not parse is redacted whole.
 */
export function redactPostgresUrl(value: string): string {
  const shown = redactUrlPassword(value);
  if (shown === REDACTED) return shown;
  if (!/[?&]password=/i.test(shown)) return shown;
  return shown.replace(/([?&]password=)[^&#]*/gi, `$1${REDACTED}`);
}

function postgresUrlPasswords(value: string): string[] {
  const found = urlPasswords(value);
  let url: URL | undefined;
  try {
    url = new URL(value);
  } catch {
    return found;
  }
  for (const [key, param] of url.searchParams) if (key.toLowerCase() === 'password') found.push(param);
  // The raw (percent-encoded) form as written, too.
  for (const m of value.matchAll(/[?&]password=([^&#]*)/gi)) found.push(m[1]!);
  return found;
}

function urlPasswords(value: string): string[] {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    // Sentinel and cluster URLs name several hosts, which URL does not parse: their password too.
    return [value, ...multiHostPasswords(value)];
  }
  if (url.password === '') return [];
  let decoded = url.password;
  try {
    decoded = decodeURIComponent(url.password);
  } catch {
    // A malformed escape: the raw form is all there is.
  }
  return [url.password, decoded];
}

function multiHostPasswords(value: string): string[] {
  if (!multiHostKind(value)) return [];
  const userinfo = /^[^:]+:\/\/([^@/]*)@/.exec(value)?.[1];
  const colon = userinfo?.indexOf(':') ?? -1;
  if (!userinfo || colon < 0) return [];
  const raw = userinfo.slice(colon + 1);
  try {
    return [raw, parseMultiHostUrl(value).password ?? raw];
  } catch {
    return [raw];
  }
}

function redactOptions(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(redactOptions);
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [key, inner] of Object.entries(value)) {
    out[key] =
      SECRET_OPTION_KEY.test(key) && inner !== null && typeof inner !== 'object'
        ? REDACTED
        : redactOptions(inner);
  }
  return out;
}

function collectOptionSecrets(value: unknown, found: Set<string>): void {
  if (Array.isArray(value)) {
    value.forEach((v) => collectOptionSecrets(v, found));
    return;
  }
  if (value === null || typeof value !== 'object') return;
  for (const [key, inner] of Object.entries(value)) {
    if (SECRET_OPTION_KEY.test(key) && inner !== null && typeof inner !== 'object') found.add(String(inner));
    else collectOptionSecrets(inner, found);
  }
}
