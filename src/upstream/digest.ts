// HTTP Digest authentication (RFC 7616, with RFC 2069 compatibility when no qop is offered and the
// source's DigestPolicy allows it).
// Pure logic, no I/O: the HTTP client feeds challenges in and asks for Authorization headers.
import { hash, randomUUID } from 'node:crypto';

export type DigestAlgorithm = 'MD5' | 'MD5-sess' | 'SHA-256' | 'SHA-256-sess';

export interface DigestChallenge {
  realm: string;
  nonce: string;
  opaque?: string;
  /** As the server spelled it (echoed back verbatim); undefined when the server sent none (MD5). */
  algorithm?: string;
  /** Normalized algorithm used for hashing. */
  hash: DigestAlgorithm;
  /** The qop we will use: 'auth', or undefined for RFC 2069 mode. */
  qop?: 'auth';
  stale: boolean;
  /** RFC 7616 `userhash=true`: the username is sent hashed. */
  userhash: boolean;
}

export class DigestChallengeError extends Error {
  override name = 'DigestChallengeError';
}

const ALGORITHMS: Record<string, DigestAlgorithm> = {
  md5: 'MD5',
  'md5-sess': 'MD5-sess',
  'sha-256': 'SHA-256',
  'sha-256-sess': 'SHA-256-sess',
};

/**
 * The most WWW-Authenticate text read, all headers together. The HTTP client refuses response
 * headers over 16 KiB anyway; the bound keeps the parse (an object per challenge) small whatever
 * delivers the header.
 */
export const MAX_CHALLENGE_CHARS = 16 * 1024;

/**
 * Split a WWW-Authenticate value (possibly several challenges, possibly several headers) into
 * scheme + params. Tokens and quoted strings are tokenized by hand because commas separate both
 * challenges and params, and quoted strings may contain commas and escaped quotes.
 */
export function parseAuthenticateHeader(
  header: string | string[],
): { scheme: string; params: Record<string, string> }[] {
  const values = Array.isArray(header) ? header : [header];
  const length = values.reduce((sum, v) => sum + v.length, 0);
  if (length > MAX_CHALLENGE_CHARS)
    throw new DigestChallengeError(
      `WWW-Authenticate of ${length} characters, over the ${MAX_CHALLENGE_CHARS} a challenge may take`,
    );
  const result: { scheme: string; params: Record<string, string> }[] = [];
  for (const value of values) parseOne(value, result);
  return result;
}

function parseOne(input: string, out: { scheme: string; params: Record<string, string> }[]): void {
  let i = 0;
  const n = input.length;
  const skipWs = (): void => {
    while (i < n && (input[i] === ' ' || input[i] === '\t')) i++;
  };
  const readToken = (): string => {
    const start = i;
    while (i < n && !endsToken(input.charCodeAt(i))) i++;
    return input.slice(start, i);
  };
  const readQuoted = (): string => {
    // Precondition: input[i] === '"'.
    i++;
    let s = '';
    while (i < n && input[i] !== '"') {
      if (input[i] === '\\' && i + 1 < n) i++;
      s += input[i];
      i++;
    }
    i++; // closing quote (or end of input for an unterminated string: tolerated)
    return s;
  };
  let current: { scheme: string; params: Record<string, string> } | undefined;
  while (i < n) {
    skipWs();
    if (input[i] === ',') {
      i++;
      continue;
    }
    if (i >= n) break;
    const token = readToken();
    skipWs();
    if (input[i] === '=' && current && token !== '') {
      // A param of the current challenge (token68 values of other schemes end up here too,
      // harmlessly, because we only ever read Digest params).
      i++;
      skipWs();
      const value = input[i] === '"' ? readQuoted() : readToken();
      current.params[token.toLowerCase()] = value;
    } else if (token !== '') {
      // A new scheme. Whatever follows before the next "name=" is its token68 or first param.
      current = { scheme: token, params: {} };
      out.push(current);
      // Token68 (e.g. `Negotiate abc==`) for non-Digest schemes: swallow it.
      if (input[i] !== undefined && input[i] !== ',' && !isParamAhead(input, i)) {
        while (i < n && input[i] !== ',') i++;
      }
    } else {
      i++;
    }
  }
}

/** `[\s,=]` for the characters a header value holds (latin1). */
function endsToken(c: number): boolean {
  return c === 0x2c || c === 0x3d || c === 0x20 || (c >= 0x09 && c <= 0x0d) || c === 0xa0;
}

/** Sticky: matched at `lastIndex`, so asking at each of many schemes never copies the rest of the header. */
const PARAM_AHEAD = /[!#$%&'*+\-.^_`|~0-9A-Za-z]+\s*=(?!=)/y;

function isParamAhead(input: string, from: number): boolean {
  PARAM_AHEAD.lastIndex = from;
  return PARAM_AHEAD.test(input);
}

/**
 * The weakest Digest a source accepts (sources[].digest_min, require_qop). A server, or anything on
 * the path, chooses what it offers; without a floor it could always force the weakest mode.
 */
export interface DigestPolicy {
  /** `sha-256`: MD5 and MD5-sess challenges are refused. */
  min: 'md5' | 'sha-256';
  /** Refuse the RFC 2069 form (no qop: no client nonce, no nonce count). */
  requireQop: boolean;
}

/** Everything UPSTREAM-DIALECTS D1 and D3 list is answered (the config defaults). */
export const ANY_DIGEST: DigestPolicy = { min: 'md5', requireQop: false };

/**
 * The challenges could be answered but the source's policy refuses all of them. Its message names
 * what was offered and the keys that would accept it; the client turns it into a refusal.
 */
export class DigestTooWeakError extends DigestChallengeError {
  override name = 'DigestTooWeakError';
}

/** At most this many offered challenges are described in an error (a 401 may list thousands). */
const DESCRIBED_OFFERS = 4;

/**
 * Pick and validate the Digest challenge among the challenges in a WWW-Authenticate header.
 *
 * RFC 7616 has a server list its challenges in its order of preference; feedsync takes the
 * strongest one it can answer and `policy` allows (SHA-256 before MD5, with qop before without),
 * the server's order deciding only among equals: the order reaches us through whatever sits on
 * the path, and a weaker choice buys nothing.
 */
export function parseDigestChallenge(
  header: string | string[] | undefined,
  policy: DigestPolicy = ANY_DIGEST,
): DigestChallenge {
  if (header === undefined || (Array.isArray(header) && header.length === 0)) {
    throw new DigestChallengeError('401 without a WWW-Authenticate header');
  }
  const challenges = parseAuthenticateHeader(header).filter((c) => c.scheme.toLowerCase() === 'digest');
  if (challenges.length === 0) throw new DigestChallengeError('no Digest challenge in WWW-Authenticate');
  const supported = challenges
    .map((c) => ({ c, hash: ALGORITHMS[(c.params.algorithm ?? 'MD5').toLowerCase()] }))
    .filter((x): x is { c: (typeof challenges)[number]; hash: DigestAlgorithm } => x.hash !== undefined);
  if (supported.length === 0) {
    const offered = challenges.slice(0, DESCRIBED_OFFERS).map((c) => cut(c.params.algorithm ?? 'MD5'));
    throw new DigestChallengeError(
      `unsupported digest algorithm(s): ${offered.join(', ')}${challenges.length > DESCRIBED_OFFERS ? ', …' : ''}`,
    );
  }
  // auth-int would force us to hash every body; we only GET, and servers offering only auth-int
  // are unheard of for this API, so such a challenge is skipped, or rejected clearly if alone.
  const answerable = supported
    .filter(({ c }) => c.params.qop === undefined || offersAuth(c.params.qop))
    .map((x) => ({ ...x, qop: x.c.params.qop !== undefined }));
  if (answerable.length === 0)
    throw new DigestChallengeError(`unsupported qop: ${cut(supported[0]!.c.params.qop!)}`);
  const allowed = answerable.filter((x) => strongEnough(x.hash, policy) && (x.qop || !policy.requireQop));
  if (allowed.length === 0) throw tooWeak(answerable, policy);
  allowed.sort((a, b) => rank(b) - rank(a));
  const { c, hash, qop } = allowed[0]!;
  const { realm, nonce } = c.params;
  if (realm === undefined) throw new DigestChallengeError('Digest challenge without realm');
  if (nonce === undefined || nonce === '') throw new DigestChallengeError('Digest challenge without nonce');
  return {
    realm,
    nonce,
    opaque: c.params.opaque,
    algorithm: c.params.algorithm,
    hash,
    qop: qop ? 'auth' : undefined,
    stale: (c.params.stale ?? '').toLowerCase() === 'true',
    userhash: (c.params.userhash ?? '').toLowerCase() === 'true',
  };
}

function strongEnough(hash: DigestAlgorithm, policy: DigestPolicy): boolean {
  return policy.min === 'md5' || strength(hash) >= strength('SHA-256');
}

/** Algorithm first, then qop: SHA-256 without qop still outranks MD5 with it. */
function rank(x: { hash: DigestAlgorithm; qop: boolean }): number {
  return strength(x.hash) * 2 + (x.qop ? 1 : 0);
}

function tooWeak(
  offers: { hash: DigestAlgorithm; qop: boolean }[],
  policy: DigestPolicy,
): DigestTooWeakError {
  const shown = offers
    .slice(0, DESCRIBED_OFFERS)
    .map((o) => `${o.hash} ${o.qop ? 'with qop=auth' : 'without qop'}`);
  if (offers.length > DESCRIBED_OFFERS) shown.push(`${offers.length - DESCRIBED_OFFERS} more`);
  // The keys that, relaxed, would accept one of the offers.
  const keys: string[] = [];
  if (policy.min !== 'md5' && offers.some((o) => !strongEnough(o.hash, policy))) keys.push('digest_min: md5');
  if (policy.requireQop && offers.some((o) => !o.qop)) keys.push('require_qop: false');
  return new DigestTooWeakError(
    `the server offers only ${shown.join(', ')}, weaker than the source accepts ` +
      `(digest_min: ${policy.min}, require_qop: ${policy.requireQop}); ` +
      `only if nothing on the path can alter the challenge, set ${keys.join(' or ')} on the source`,
  );
}

/** Upstream text in an error message: its start only. */
function cut(text: string): string {
  return text.length > 40 ? `${text.slice(0, 40)}…` : text;
}

function offersAuth(qop: string): boolean {
  return qop.split(',').some((q) => q.trim().toLowerCase() === 'auth');
}

function strength(a: DigestAlgorithm): number {
  return a.startsWith('SHA-256') ? 2 : 1;
}

// crypto.hash is the one-shot form: a quarter of createHash().update().digest()'s cost, and a
// Digest request hashes three to five strings.
function h(algorithm: DigestAlgorithm, data: string): string {
  return hash(algorithm.startsWith('SHA-256') ? 'sha256' : 'md5', data, 'hex');
}

function quote(s: string): string {
  // Nearly every value has nothing to escape: skip the regular expression then.
  return s.includes('"') || s.includes('\\') ? `"${s.replace(/["\\]/g, '\\$&')}"` : `"${s}"`;
}

export interface DigestCredentials {
  username: string;
  password: string;
}

// H(username:realm:password) per credentials, algorithm and realm: the same for every request
// until the realm changes, and one of the three hashes each request would otherwise compute.
const credentialHashes = new WeakMap<DigestCredentials, Map<string, string>>();

function credentialHash(alg: DigestAlgorithm, creds: DigestCredentials, realm: string): string {
  let byRealm = credentialHashes.get(creds);
  if (!byRealm) credentialHashes.set(creds, (byRealm = new Map()));
  const key = `${alg}:${realm}`;
  let value = byRealm.get(key);
  if (value === undefined) {
    value = h(alg, `${creds.username}:${realm}:${creds.password}`);
    // A server that changes realms endlessly must not grow this without bound.
    if (byRealm.size >= 16) byRealm.clear();
    byRealm.set(key, value);
  }
  return value;
}

/** Build one Authorization header value for `challenge`. `nc` is the 1-based nonce count. */
export function buildAuthorization(
  challenge: DigestChallenge,
  creds: DigestCredentials,
  method: string,
  uri: string,
  nc: number,
  cnonce: string,
): string {
  const alg = challenge.hash;
  let ha1 = credentialHash(alg, creds, challenge.realm);
  if (alg.endsWith('-sess')) ha1 = h(alg, `${ha1}:${challenge.nonce}:${cnonce}`);
  const ha2 = h(alg, `${method}:${uri}`);
  const ncHex = nc.toString(16).padStart(8, '0');
  const response = challenge.qop
    ? h(alg, `${ha1}:${challenge.nonce}:${ncHex}:${cnonce}:${challenge.qop}:${ha2}`)
    : h(alg, `${ha1}:${challenge.nonce}:${ha2}`);
  const username = challenge.userhash ? h(alg, `${creds.username}:${challenge.realm}`) : creds.username;
  const parts = [`username=${quote(username)}`, `realm=${quote(challenge.realm)}`, `uri=${quote(uri)}`];
  if (challenge.algorithm !== undefined) parts.push(`algorithm=${challenge.algorithm}`);
  parts.push(`nonce=${quote(challenge.nonce)}`);
  if (challenge.qop) parts.push(`nc=${ncHex}`, `cnonce=${quote(cnonce)}`, `qop=${challenge.qop}`);
  parts.push(`response=${quote(response)}`);
  if (challenge.opaque !== undefined) parts.push(`opaque=${quote(challenge.opaque)}`);
  if (challenge.userhash) parts.push('userhash=true');
  return `Digest ${parts.join(', ')}`;
}

export interface Authorized {
  header: string;
  /** Which challenge generation built it; lets the client tell "reused nonce" from "fresh". */
  generation: number;
  /** Whether this is the first use of the challenge's nonce (nc = 1). */
  fresh: boolean;
}

/**
 * The digest state for one origin: the current challenge and its nonce count. Shared by every
 * request in flight to that origin; authorize() is synchronous so each call gets its own nc.
 */
export class DigestSession {
  private challenge: DigestChallenge | undefined;
  private nc = 0;
  private gen = 0;

  constructor(
    private readonly creds: DigestCredentials,
    private readonly policy: DigestPolicy = ANY_DIGEST,
    // randomUUID draws from a cached entropy pool: a fresh randomBytes() per request showed up in
    // profiles. 122 random bits are plenty for a client nonce.
    private readonly makeCnonce: () => string = () => randomUUID().replaceAll('-', ''),
  ) {}

  /** Whether a challenge is cached (so requests can be authorized pre-emptively). */
  get ready(): boolean {
    return this.challenge !== undefined;
  }

  /** Current challenge generation; bumps on every onChallenge/nextnonce. */
  get generation(): number {
    return this.gen;
  }

  /** Authorization for one request, or undefined when no challenge has been seen yet. */
  authorize(method: string, uri: string): Authorized | undefined {
    const challenge = this.challenge;
    if (!challenge) return undefined;
    this.nc += 1;
    const nc = this.nc;
    return {
      header: buildAuthorization(challenge, this.creds, method, uri, nc, this.makeCnonce()),
      generation: this.gen,
      fresh: nc === 1,
    };
  }

  /** A 401's WWW-Authenticate: adopt its nonce (stale or not) and restart counting. */
  onChallenge(header: string | string[] | undefined): DigestChallenge {
    const challenge = parseDigestChallenge(header, this.policy);
    const previous = this.challenge;
    this.challenge = challenge;
    this.gen += 1;
    // Some servers hand out the same nonce again (time-based nonces); restarting nc then would
    // repeat counts already used and look like a replay.
    if (!previous || previous.nonce !== challenge.nonce || previous.realm !== challenge.realm) this.nc = 0;
    return challenge;
  }

  /** Authentication-Info on a success: switch to `nextnonce` when the server rotates it. */
  onAuthenticationInfo(header: string | string[] | undefined): void {
    if (header === undefined || !this.challenge) return;
    const value = Array.isArray(header) ? header.join(', ') : header;
    // Authentication-Info has no scheme, so prefix one to reuse the challenge tokenizer.
    const [info] = parseAuthenticateHeader(`Digest ${value}`);
    const next = info?.params.nextnonce;
    if (next && next !== this.challenge.nonce) {
      this.challenge = { ...this.challenge, nonce: next, stale: false };
      this.nc = 0;
      this.gen += 1;
    }
  }
}
