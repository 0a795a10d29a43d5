// Server side of HTTP Digest authentication (RFC 7616, RFC 2617, RFC 2069) for one service: issues
// challenges (one per offered algorithm), verifies every parameter of an Authorization header,
// expires nonces by age or by use count and rejects nc replays. What it offers is read from the
// dialect on every request, so a dialect change applies at once.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Dialect, DigestAlgorithm } from './dialect.js';

export type DigestSettings = Pick<
  Dialect,
  | 'digestAlgorithms'
  | 'digestChallenges'
  | 'digestQop'
  | 'digestOpaque'
  | 'digestAlgorithmParam'
  | 'digestDomain'
  | 'digestNextnonce'
  | 'nonceTtlMs'
  | 'nonceMaxUses'
>;

export interface DigestGuardOptions {
  realm: string;
  /** The `domain` a challenge names when the dialect says so (the service's path prefix). */
  domain: string;
  username: string;
  password: string;
  settings: () => DigestSettings;
  now?: () => number;
}

/** `nextnonce`: a fresh nonce for Authentication-Info, when the dialect hands them out. */
export type DigestVerdict = { ok: true; nextnonce?: string } | { ok: false; stale: boolean; reason: string };

interface NonceState {
  issuedAt: number;
  uses: number;
  highestNc: number;
  /** nc values seen within the replay window below highestNc. */
  seen: Set<number>;
}

/**
 * Concurrent requests on one nonce reach the server in any order, so a strictly increasing nc
 * would reject honest clients. Like an IPsec anti-replay window: an nc is accepted once, and only
 * if it is not more than this far below the highest one seen.
 */
const REPLAY_WINDOW = 1024;

const ALWAYS = ['username', 'realm', 'nonce', 'uri', 'response'] as const;
const WITH_QOP = ['qop', 'nc', 'cnonce'] as const;

export class DigestGuard {
  private readonly nonces = new Map<string, NonceState>();
  private readonly opaque = randomBytes(12).toString('hex');
  private readonly now: () => number;
  private lastSweep = 0;

  constructor(private readonly opts: DigestGuardOptions) {
    this.now = opts.now ?? Date.now;
  }

  /**
   * The WWW-Authenticate value(s) for a 401, all on one fresh nonce: an array for several headers,
   * a string for one header (listing several challenges when several algorithms are offered).
   */
  challenge(stale = false): string | string[] {
    const s = this.opts.settings();
    this.sweep(s.nonceTtlMs);
    const nonce = this.issueNonce();
    const challenges = s.digestAlgorithms.map((algorithm) => {
      const parts = [`realm="${this.opts.realm}"`];
      if (s.digestQop !== 'none') parts.push(`qop="${s.digestQop}"`);
      if (s.digestAlgorithmParam || algorithm !== 'MD5') parts.push(`algorithm=${algorithm}`);
      if (s.digestDomain) parts.push(`domain="${this.opts.domain}"`);
      parts.push(`nonce="${nonce}"`);
      if (s.digestOpaque) parts.push(`opaque="${this.opaque}"`);
      if (stale) parts.push('stale=true');
      return `Digest ${parts.join(', ')}`;
    });
    if (challenges.length === 1) return challenges[0] as string;
    return s.digestChallenges === 'headers' ? challenges : challenges.join(', ');
  }

  verify(method: string, requestUrl: string, authorization: string | undefined): DigestVerdict {
    if (!authorization) return fail('no Authorization header');
    if (!/^digest\s/i.test(authorization)) return fail('not a Digest Authorization header');
    const s = this.opts.settings();
    const p = parseAuthParams(authorization.replace(/^digest\s+/i, ''));
    const legacy = s.digestQop === 'none';
    for (const key of [...ALWAYS, ...(legacy ? [] : WITH_QOP), ...(s.digestOpaque ? ['opaque'] : [])]) {
      if (p[key] === undefined) return fail(`missing parameter ${key}`);
    }
    const { realm, username } = this.opts;
    if (p.username !== username) return fail('unknown user');
    if (p.realm !== realm) return fail('wrong realm');
    if (s.digestOpaque && p.opaque !== this.opaque) return fail('wrong opaque');
    const offeredQops = legacy ? [] : s.digestQop.split(',');
    if (legacy ? p.qop !== undefined : !offeredQops.includes(p.qop as string)) return fail('qop not offered');
    const algorithm = s.digestAlgorithms.find(
      (a) => a.toLowerCase() === (p.algorithm ?? 'MD5').toLowerCase(),
    );
    if (!algorithm) return fail('algorithm not offered');
    if (!uriMatches(p.uri as string, requestUrl)) return fail('uri does not match the request');
    if (!legacy && !/^[0-9a-f]{8}$/i.test(p.nc as string)) return fail('malformed nc');
    const expected = digestResponse({
      algorithm,
      username,
      realm,
      password: this.opts.password,
      method,
      uri: p.uri as string,
      nonce: p.nonce as string,
      ...(legacy
        ? {}
        : { nc: p.nc as string, cnonce: p.cnonce as string, qop: p.qop as 'auth' | 'auth-int' }),
      ...(p.cnonce !== undefined ? { cnonce: p.cnonce } : {}),
    });
    if (!sameText(expected, (p.response as string).toLowerCase())) return fail('wrong response');
    // Only a correct digest may learn that its nonce is stale (RFC 7616 §3.3).
    const state = this.nonces.get(p.nonce as string);
    if (!state || this.now() - state.issuedAt > s.nonceTtlMs) {
      return { ok: false, stale: true, reason: 'nonce expired' };
    }
    if (s.nonceMaxUses > 0 && state.uses >= s.nonceMaxUses) {
      this.nonces.delete(p.nonce as string);
      return { ok: false, stale: true, reason: 'nonce used up' };
    }
    if (!legacy) {
      const nc = parseInt(p.nc as string, 16);
      if (state.seen.has(nc) || nc <= state.highestNc - REPLAY_WINDOW) return fail('nc replayed');
      state.seen.add(nc);
      if (nc > state.highestNc) {
        state.highestNc = nc;
        if (state.seen.size > 2 * REPLAY_WINDOW)
          for (const old of state.seen) if (old <= nc - REPLAY_WINDOW) state.seen.delete(old);
      }
    }
    state.uses++;
    return s.digestNextnonce ? { ok: true, nextnonce: this.issueNonce() } : { ok: true };
  }

  private issueNonce(): string {
    const nonce = randomBytes(16).toString('hex');
    this.nonces.set(nonce, { issuedAt: this.now(), uses: 0, highestNc: 0, seen: new Set() });
    return nonce;
  }

  private sweep(ttlMs: number): void {
    const now = this.now();
    if (now - this.lastSweep < ttlMs) return;
    this.lastSweep = now;
    for (const [nonce, st] of this.nonces) {
      if (now - st.issuedAt > ttlMs) this.nonces.delete(nonce);
    }
  }
}

export interface DigestInput {
  algorithm: DigestAlgorithm;
  username: string;
  realm: string;
  password: string;
  method: string;
  uri: string;
  nonce: string;
  /** Absent with cnonce and qop: RFC 2069's response = H(HA1:nonce:HA2). */
  nc?: string;
  cnonce?: string;
  qop?: 'auth' | 'auth-int';
}

/** The `response` value of RFC 7616 §3.4.1 (qop auth or auth-int of an empty body), or RFC 2069's. */
export function digestResponse(d: DigestInput): string {
  const hashName = d.algorithm.startsWith('SHA-256') ? 'sha256' : 'md5';
  const h = (s: string) => createHash(hashName).update(s, 'utf8').digest('hex');
  let ha1 = h(`${d.username}:${d.realm}:${d.password}`);
  if (d.algorithm.endsWith('-sess')) ha1 = h(`${ha1}:${d.nonce}:${d.cnonce ?? ''}`);
  // GET requests have no body: auth-int hashes the empty entity.
  const ha2 = d.qop === 'auth-int' ? h(`${d.method}:${d.uri}:${h('')}`) : h(`${d.method}:${d.uri}`);
  if (d.qop === undefined) return h(`${ha1}:${d.nonce}:${ha2}`);
  return h(`${ha1}:${d.nonce}:${d.nc ?? ''}:${d.cnonce ?? ''}:${d.qop}:${ha2}`);
}

/** Parses `k=v, k="quoted \" v"` lists (Authorization and WWW-Authenticate parameters). */
export function parseAuthParams(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  const re = /([a-zA-Z0-9_-]+)\s*=\s*("((?:[^"\\]|\\.)*)"|[^,\s]*)/g;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    const key = (m[1] as string).toLowerCase();
    out[key] = m[3] !== undefined ? m[3].replace(/\\(.)/g, '$1') : (m[2] as string);
  }
  return out;
}

function uriMatches(uri: string, requestUrl: string): boolean {
  if (uri === requestUrl) return true;
  // Some clients send the absolute form; its path and query must still be the request's.
  try {
    const u = new URL(uri);
    return u.pathname + u.search === requestUrl;
  } catch {
    return false;
  }
}

function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

function fail(reason: string): DigestVerdict {
  return { ok: false, stale: false, reason };
}
