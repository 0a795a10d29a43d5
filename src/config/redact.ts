// Secrets out of printed configs and logs. `redactConfig` is for showing a config
// (check-config, start-up logs); `collectSecrets` feeds the logger's value-based redaction.
import {
  isCredentialName,
  isCredentialParam,
  REDACTED,
  redactUrlCredentials,
} from '../observability/redact-text.js';
import { multiHostKind, parseMultiHostUrl } from '../queue/bullmq/redis-multi-host.js';
import type { FeedsyncConfig } from './types.js';

export { REDACTED };

// Module sinks take free-form options; keys that look like credentials (isCredentialName) are
// treated as secrets because nothing else knows what a user's sink keeps there.

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
      sink.url = redactUrlPassword(sink.url);
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
      urlPasswords(sink.url).forEach((p) => found.add(p));
    } else if (sink.type === 'module') {
      collectOptionSecrets(sink.options, found);
    }
  }
  found.delete('');
  return [...found];
}

/**
 * A URL's credentials redacted: the password of its userinfo (`redis://user:pw@host:6379/0` →
 * `redis://user:<redacted>@host:6379/0`) and the value of every credential-like query parameter
 * (`?password=`, which Redis and PostgreSQL clients read, `?token=`, `?sig=`, `?api_key=`…; see
 * isCredentialParam). Done on the text, not via URL setters, so `<redacted>` stays readable
 * instead of being percent-encoded. A string that does not parse as a URL is redacted whole: it
 * cannot be shown safely.
 */
export function redactUrlPassword(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return REDACTED;
  }
  const redacted = redactUrlCredentials(url.password === '' ? value : redactUserinfoPassword(value));
  // Belt and braces for odd inputs the URL parser normalises (tabs, backslashes): never leak. (A
  // parameter value of one or two characters is found in any text, `<redacted>` included.)
  const leaks = (p: string) => redacted.includes(p);
  return userinfoPasswords(url).some(leaks) || paramValues(url).some((p) => p.length >= 3 && leaks(p))
    ? REDACTED
    : redacted;
}

/** The userinfo's password replaced; the userinfo ends at the LAST `@` of the authority (a password may hold an encoded one). */
function redactUserinfoPassword(value: string): string {
  const start = value.indexOf('//') + 2;
  const end = value.slice(start).search(/[/?#\\]/);
  const authorityEnd = end < 0 ? value.length : start + end;
  const at = value.lastIndexOf('@', authorityEnd - 1);
  const colon = value.indexOf(':', start);
  if (start < 2 || at < start || colon < 0 || colon > at) return REDACTED;
  return `${value.slice(0, colon + 1)}${REDACTED}${value.slice(at)}`;
}

/** The credentials a URL carries (userinfo password, credential-like query parameters), raw and decoded. */
function urlPasswords(value: string): string[] {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    // Sentinel and cluster URLs name several hosts, which URL does not parse: their password too.
    return [value, ...multiHostPasswords(value)];
  }
  return [...userinfoPasswords(url), ...paramValues(url)];
}

function userinfoPasswords(url: URL): string[] {
  if (url.password === '') return [];
  try {
    return [url.password, decodeURIComponent(url.password)];
  } catch {
    // A malformed escape: the raw form is all there is.
    return [url.password];
  }
}

/** The values of the credential-like query parameters, decoded and as written (percent-encoded). */
function paramValues(url: URL): string[] {
  const found: string[] = [];
  for (const [key, param] of url.searchParams) if (isCredentialParam(key)) found.push(param);
  for (const pair of url.search.slice(1).split('&')) {
    const eq = pair.indexOf('=');
    if (eq > 0 && isCredentialParam(pair.slice(0, eq))) found.push(pair.slice(eq + 1));
  }
  return found.filter((v) => v !== '');
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

/** Module options with credential-named values redacted, and the credentials of any URL among them. */
function redactOptions(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(redactOptions);
  if (typeof value === 'string') return redactUrlCredentials(value);
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [key, inner] of Object.entries(value)) {
    out[key] =
      isCredentialName(key) && inner !== null && typeof inner !== 'object' ? REDACTED : redactOptions(inner);
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
    if (isCredentialName(key) && inner !== null && typeof inner !== 'object') found.add(String(inner));
    else collectOptionSecrets(inner, found);
  }
}
