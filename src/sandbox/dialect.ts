// The forms the sandbox's services answer in: one switch per form the upstream specs leave open
// (JSON, XML, datetimes, Digest, feed order, HTTP), and named profiles bundling them. Every switch
// is documented, with the test that proves feedsync reads it, in docs/sandbox.md.
import { ConfigError } from '../core/errors.js';

export type DigestAlgorithm = 'MD5' | 'SHA-256' | 'MD5-sess' | 'SHA-256-sess';
export const DIGEST_ALGORITHMS: readonly DigestAlgorithm[] = ['MD5', 'SHA-256', 'MD5-sess', 'SHA-256-sess'];

export interface Dialect {
  /** JSON collections carry `resource_type` (`{"resource_type":"events","entries":[…]}`). */
  collectionType: boolean;
  /** Feed pages carry `total_entries`, `next_link`, `prev_link` (XML: total-entries, link rel next/prev). */
  pagination: boolean;
  /** A list inside a resource, in JSON: `{"entries":[…]}` or a bare array. */
  nestedLists: 'entries' | 'array';
  /**
   * How datetimes are written. `default`: JSON as UTC with milliseconds, XML without milliseconds
   * and +01:00 on odd minutes; `z` / `z-ms`: UTC with `Z`, without / with milliseconds;
   * `offset` / `offset-ms`: numeric offsets `+01:00`, `-05:30`, `+05:30`, `-08:00`; `offset-basic`:
   * the same without the colon (`+0100`), with milliseconds on every other instant.
   */
  datetimes: 'default' | 'z' | 'z-ms' | 'offset' | 'offset-ms' | 'offset-basic';
  /** The feed embeds a subject under the generic label (`subject`) or under its own type (`job`). */
  embeddedLabel: 'generic' | 'own-type';
  /**
   * Event ids from about 1,000 (`small`) or above 2³¹ (`large`, still below 2⁵³). Read when the
   * sandbox starts: changing it later does not renumber events.
   */
  eventIds: 'small' | 'large';
  /** About one event in twelve gets a type the specs' tables do not list (`job_archived`, `title_archived`). */
  unknownEventTypes: boolean;
  /** Every resource with a self link also carries a field and a link the specs do not list. */
  extras: boolean;
  /** An optional field without a value: sent as null (XML nil="true") or left out. */
  nulls: 'null' | 'absent';
  jsonContentType: 'plain' | 'charset' | 'vendor';
  /** JSON bodies start with a UTF-8 byte-order mark. */
  jsonBom: boolean;
  xmlDeclaration: boolean;
  /** Text containing markup characters is written as CDATA instead of escaped. */
  xmlCdata: boolean;
  /** Non-ASCII characters as numeric character references (`&#233;`). */
  xmlCharRefs: boolean;
  xmlQuote: 'double' | 'single';
  /** `<link rel=… href=…/>` or `<link href=… rel=…/>`; typed elements put `type` last either way. */
  xmlAttrOrder: 'rel-first' | 'href-first';
  xmlEmptyArray: 'self-closed' | 'open-close' | 'whitespace';
  /** Indented with line breaks, or everything on one line. */
  xmlIndent: boolean;
  xmlContentType: 'application' | 'application-charset' | 'text' | 'text-charset';
  /** The algorithms offered, one challenge each, in this order; any of them is accepted. */
  digestAlgorithms: DigestAlgorithm[];
  /** Several challenges as several WWW-Authenticate headers or as one header listing them. */
  digestChallenges: 'headers' | 'one-header';
  /** `none`: RFC 2069, no qop, response = H(HA1:nonce:HA2). */
  digestQop: 'auth' | 'auth,auth-int' | 'none';
  digestOpaque: boolean;
  /** false: an MD5 challenge without `algorithm=` (which means MD5). */
  digestAlgorithmParam: boolean;
  /** Challenges carry `domain` (the service's path prefix). */
  digestDomain: boolean;
  /** Successful answers carry `Authentication-Info: nextnonce="…"`, a fresh nonce the client may move to. */
  digestNextnonce: boolean;
  /** A nonce's lifetime; a correct digest on an older one gets 401 stale=true. */
  nonceTtlMs: number;
  /** Requests a nonce is good for (0: unlimited); the next one gets 401 stale=true. */
  nonceMaxUses: number;
  /** The workflow feed without `newer_than` (the spec is silent): its oldest 50 or its newest 50. */
  workflowUnbounded: 'oldest' | 'newest';
  /** gzip, deflate or br when the request's Accept-Encoding asks for one. */
  compression: boolean;
  transfer: 'content-length' | 'chunked';
  /**
   * The server closes a keep-alive connection idle this long (0: Node's default), while its
   * Keep-Alive header still promises more, so a client reusing it fails at once.
   */
  idleCloseMs: number;
}

const DEFAULT: Dialect = {
  collectionType: true,
  pagination: false,
  nestedLists: 'entries',
  datetimes: 'default',
  embeddedLabel: 'generic',
  eventIds: 'small',
  unknownEventTypes: false,
  extras: false,
  nulls: 'null',
  jsonContentType: 'charset',
  jsonBom: false,
  xmlDeclaration: true,
  xmlCdata: false,
  xmlCharRefs: false,
  xmlQuote: 'double',
  xmlAttrOrder: 'rel-first',
  xmlEmptyArray: 'self-closed',
  xmlIndent: true,
  xmlContentType: 'application-charset',
  digestAlgorithms: ['MD5'],
  digestChallenges: 'headers',
  digestQop: 'auth',
  digestOpaque: true,
  digestAlgorithmParam: true,
  digestDomain: false,
  digestNextnonce: false,
  nonceTtlMs: 60_000,
  nonceMaxUses: 0,
  workflowUnbounded: 'oldest',
  compression: true,
  transfer: 'content-length',
  idleCloseMs: 0,
};

/** Named bundles of switches; each profile lists only what differs from `default`. */
export const DIALECT_PROFILES = {
  /** What a spec-following server most plausibly sends, with MD5 Digest (what curl and requests speak). */
  default: {},
  /** The specs' words read literally: collections are objects with `entries`, nothing more. */
  'strict-spec': {
    collectionType: false,
    datetimes: 'z',
    jsonContentType: 'plain',
    xmlContentType: 'application',
    digestAlgorithmParam: false,
    compression: false,
  },
  /** What Rails-style services send: bare arrays, +01:00 offsets, XML without declaration, MD5 qop auth. */
  rails: {
    nestedLists: 'array',
    embeddedLabel: 'own-type',
    datetimes: 'offset-ms',
    xmlDeclaration: false,
    pagination: true,
    transfer: 'chunked',
  },
  /** RFC 7616 as written: SHA-256 and MD5 challenges in one 401, -sess variants, nonces by use count. */
  'digest-modern': {
    digestAlgorithms: ['SHA-256-sess', 'SHA-256', 'MD5-sess', 'MD5'],
    digestChallenges: 'one-header',
    digestQop: 'auth,auth-int',
    digestDomain: true,
    digestNextnonce: true,
    nonceMaxUses: 25,
    nonceTtlMs: 1500,
  },
  /** RFC 2069 Digest (no qop, no opaque, no algorithm) and the workflow feed listing its newest first. */
  'digest-legacy': {
    digestQop: 'none',
    digestOpaque: false,
    digestAlgorithmParam: false,
    nonceMaxUses: 40,
    workflowUnbounded: 'newest',
  },
  /** Every awkward form at once: BOM, vendor +json, text/xml, single quotes, CDATA, char refs, … */
  'odd-syntax': {
    collectionType: false,
    pagination: true,
    datetimes: 'offset-basic',
    eventIds: 'large',
    unknownEventTypes: true,
    extras: true,
    nulls: 'absent',
    jsonContentType: 'vendor',
    jsonBom: true,
    xmlCdata: true,
    xmlCharRefs: true,
    xmlQuote: 'single',
    xmlAttrOrder: 'href-first',
    xmlEmptyArray: 'whitespace',
    xmlIndent: false,
    xmlContentType: 'text',
    transfer: 'chunked',
    workflowUnbounded: 'newest',
  },
  /** A server that drops idle keep-alive connections quickly, and other offsets (-05:30) with Z mixed in. */
  'flaky-keepalive': {
    datetimes: 'offset',
    xmlEmptyArray: 'open-close',
    xmlContentType: 'text-charset',
    idleCloseMs: 50,
    nonceTtlMs: 2000,
  },
} satisfies Record<string, Partial<Dialect>>;

export type DialectName = keyof typeof DIALECT_PROFILES;
export const DIALECT_NAMES = Object.keys(DIALECT_PROFILES) as DialectName[];

/** A profile plus switches overriding it (the JS API, the control API, the CLI). */
export type DialectSpec = DialectName | (Partial<Dialect> & { profile?: DialectName });

type SwitchKind =
  { kind: 'bool' } | { kind: 'enum'; values: readonly string[] } | { kind: 'int'; min?: number; max: number };

/** How each switch is checked and parsed from text (CLI `--dialect-option key=value`). */
export const DIALECT_SWITCHES: Record<Exclude<keyof Dialect, 'digestAlgorithms'>, SwitchKind> = {
  collectionType: { kind: 'bool' },
  pagination: { kind: 'bool' },
  nestedLists: { kind: 'enum', values: ['entries', 'array'] },
  datetimes: { kind: 'enum', values: ['default', 'z', 'z-ms', 'offset', 'offset-ms', 'offset-basic'] },
  embeddedLabel: { kind: 'enum', values: ['generic', 'own-type'] },
  eventIds: { kind: 'enum', values: ['small', 'large'] },
  unknownEventTypes: { kind: 'bool' },
  extras: { kind: 'bool' },
  nulls: { kind: 'enum', values: ['null', 'absent'] },
  jsonContentType: { kind: 'enum', values: ['plain', 'charset', 'vendor'] },
  jsonBom: { kind: 'bool' },
  xmlDeclaration: { kind: 'bool' },
  xmlCdata: { kind: 'bool' },
  xmlCharRefs: { kind: 'bool' },
  xmlQuote: { kind: 'enum', values: ['double', 'single'] },
  xmlAttrOrder: { kind: 'enum', values: ['rel-first', 'href-first'] },
  xmlEmptyArray: { kind: 'enum', values: ['self-closed', 'open-close', 'whitespace'] },
  xmlIndent: { kind: 'bool' },
  xmlContentType: { kind: 'enum', values: ['application', 'application-charset', 'text', 'text-charset'] },
  digestChallenges: { kind: 'enum', values: ['headers', 'one-header'] },
  digestQop: { kind: 'enum', values: ['auth', 'auth,auth-int', 'none'] },
  digestOpaque: { kind: 'bool' },
  digestAlgorithmParam: { kind: 'bool' },
  digestDomain: { kind: 'bool' },
  digestNextnonce: { kind: 'bool' },
  nonceTtlMs: { kind: 'int', min: 1, max: 2 ** 31 - 1 },
  nonceMaxUses: { kind: 'int', max: 2 ** 31 - 1 },
  workflowUnbounded: { kind: 'enum', values: ['oldest', 'newest'] },
  compression: { kind: 'bool' },
  transfer: { kind: 'enum', values: ['content-length', 'chunked'] },
  idleCloseMs: { kind: 'int', max: 600_000 },
};

/** The complete dialect for a profile name or a profile plus overrides; bad input names the switch. */
export function resolveDialect(spec: DialectSpec = 'default', path = 'dialect'): Dialect {
  const { profile = 'default', ...overrides } = typeof spec === 'string' ? { profile: spec } : spec;
  if (!Object.hasOwn(DIALECT_PROFILES, profile)) {
    throw new ConfigError(
      typeof spec === 'string' ? path : `${path}.profile`,
      `unknown dialect ${JSON.stringify(profile)} (one of ${DIALECT_NAMES.join(', ')})`,
    );
  }
  const out: Dialect = { ...DEFAULT, ...(DIALECT_PROFILES[profile] as Partial<Dialect>) };
  for (const [key, value] of Object.entries(overrides)) {
    if (value === undefined) continue;
    (out as unknown as Record<string, unknown>)[key] = checkSwitch(`${path}.${key}`, key, value);
  }
  out.digestAlgorithms = [...out.digestAlgorithms];
  return out;
}

/** Parses `key=value` (CLI) into a typed override; the value is checked by resolveDialect. */
export function parseDialectOption(text: string): [keyof Dialect, unknown] {
  const eq = text.indexOf('=');
  if (eq <= 0) throw new ConfigError('--dialect-option', `must be key=value, got ${JSON.stringify(text)}`);
  const key = text.slice(0, eq).trim();
  const raw = text.slice(eq + 1).trim();
  if (key === 'digestAlgorithms') return [key, raw.split(',').map((a) => a.trim())];
  const sw = DIALECT_SWITCHES[key as keyof typeof DIALECT_SWITCHES];
  if (!sw) throw new ConfigError(`--dialect-option ${key}`, `unknown switch (one of ${switchNames()})`);
  if (sw.kind === 'bool') {
    if (raw !== 'true' && raw !== 'false')
      throw new ConfigError(`--dialect-option ${key}`, 'must be true or false');
    return [key as keyof Dialect, raw === 'true'];
  }
  if (sw.kind === 'int') return [key as keyof Dialect, /^\d+$/.test(raw) ? Number(raw) : raw];
  return [key as keyof Dialect, raw];
}

function checkSwitch(path: string, key: string, value: unknown): unknown {
  if (key === 'digestAlgorithms') {
    if (!Array.isArray(value) || value.length === 0) {
      throw new ConfigError(path, `must be a non-empty list of ${DIGEST_ALGORITHMS.join(', ')}`);
    }
    value.forEach((a, i) => {
      if (!DIGEST_ALGORITHMS.includes(a as DigestAlgorithm)) {
        throw new ConfigError(
          `${path}[${i}]`,
          `must be one of ${DIGEST_ALGORITHMS.join(', ')}, got ${JSON.stringify(a)}`,
        );
      }
    });
    return [...new Set(value as DigestAlgorithm[])];
  }
  const sw = DIALECT_SWITCHES[key as keyof typeof DIALECT_SWITCHES];
  if (!sw) throw new ConfigError(path, `unknown switch (one of ${switchNames()})`);
  if (sw.kind === 'bool' && typeof value !== 'boolean') throw new ConfigError(path, 'must be true or false');
  if (sw.kind === 'enum' && !sw.values.includes(value as string)) {
    throw new ConfigError(path, `must be one of ${sw.values.join(', ')}, got ${JSON.stringify(value)}`);
  }
  if (sw.kind === 'int') {
    const min = sw.min ?? 0;
    if (!(Number.isInteger(value) && (value as number) >= min && (value as number) <= sw.max)) {
      throw new ConfigError(
        path,
        `must be an integer from ${min} to ${sw.max}, got ${JSON.stringify(value)}`,
      );
    }
  }
  return value;
}

function switchNames(): string {
  return ['digestAlgorithms', ...Object.keys(DIALECT_SWITCHES)].join(', ');
}
