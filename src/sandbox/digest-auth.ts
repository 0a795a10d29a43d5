// Server side of HTTP Digest authentication (RFC 7616, qop=auth) for one service: issues challenges,
// verifies every parameter of an Authorization header, expires nonces and rejects nc replays.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { DigestAlgorithm } from './types.js';

export interface DigestGuardOptions {
  realm: string;
  algorithm: DigestAlgorithm;
  username: string;
  password: string;
  nonceTtlMs: number;
  now?: () => number;
}

export type DigestVerdict = { ok: true } | { ok: false; stale: boolean; reason: string };

interface NonceState {
  issuedAt: number;
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

const REQUIRED = ['username', 'realm', 'nonce', 'uri', 'response', 'qop', 'nc', 'cnonce', 'opaque'] as const;

export class DigestGuard {
  private readonly nonces = new Map<string, NonceState>();
  private readonly opaque = randomBytes(12).toString('hex');
  private readonly now: () => number;
  private lastSweep = 0;

  constructor(private readonly opts: DigestGuardOptions) {
    this.now = opts.now ?? Date.now;
  }

  /** A WWW-Authenticate value with a fresh nonce. */
  challenge(stale = false): string {
    this.sweep();
    const nonce = randomBytes(16).toString('hex');
    this.nonces.set(nonce, { issuedAt: this.now(), highestNc: 0, seen: new Set() });
    const { realm, algorithm } = this.opts;
    return (
      `Digest realm="${realm}", qop="auth", algorithm=${algorithm}, nonce="${nonce}", opaque="${this.opaque}"` +
      (stale ? ', stale=true' : '')
    );
  }

  verify(method: string, requestUrl: string, authorization: string | undefined): DigestVerdict {
    if (!authorization) return fail('no Authorization header');
    if (!/^digest\s/i.test(authorization)) return fail('not a Digest Authorization header');
    const p = parseAuthParams(authorization.replace(/^digest\s+/i, ''));
    for (const key of REQUIRED) if (p[key] === undefined) return fail(`missing parameter ${key}`);
    const { realm, algorithm, username } = this.opts;
    if (p.username !== username) return fail('unknown user');
    if (p.realm !== realm) return fail('wrong realm');
    if (p.opaque !== this.opaque) return fail('wrong opaque');
    if (p.qop !== 'auth') return fail('qop must be auth');
    if ((p.algorithm ?? 'MD5').toLowerCase() !== algorithm.toLowerCase()) return fail('wrong algorithm');
    if (!uriMatches(p.uri as string, requestUrl)) return fail('uri does not match the request');
    if (!/^[0-9a-f]{8}$/i.test(p.nc as string)) return fail('malformed nc');
    const expected = digestResponse({
      algorithm,
      username,
      realm,
      password: this.opts.password,
      method,
      uri: p.uri as string,
      nonce: p.nonce as string,
      nc: p.nc as string,
      cnonce: p.cnonce as string,
      qop: 'auth',
    });
    if (!sameText(expected, (p.response as string).toLowerCase())) return fail('wrong response');
    // Only a correct digest may learn that its nonce is stale (RFC 7616 §3.3).
    const state = this.nonces.get(p.nonce as string);
    if (!state || this.now() - state.issuedAt > this.opts.nonceTtlMs) {
      return { ok: false, stale: true, reason: 'nonce expired' };
    }
    const nc = parseInt(p.nc as string, 16);
    if (state.seen.has(nc) || nc <= state.highestNc - REPLAY_WINDOW) return fail('nc replayed');
    state.seen.add(nc);
    if (nc > state.highestNc) {
      state.highestNc = nc;
      if (state.seen.size > 2 * REPLAY_WINDOW)
        for (const old of state.seen) if (old <= nc - REPLAY_WINDOW) state.seen.delete(old);
    }
    return { ok: true };
  }

  private sweep(): void {
    const now = this.now();
    if (now - this.lastSweep < this.opts.nonceTtlMs) return;
    this.lastSweep = now;
    for (const [nonce, s] of this.nonces) {
      if (now - s.issuedAt > this.opts.nonceTtlMs) this.nonces.delete(nonce);
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
  nc: string;
  cnonce: string;
  qop: 'auth';
}

/** The `response` value of RFC 7616 §3.4.1 for qop=auth. */
export function digestResponse(d: DigestInput): string {
  const hashName = d.algorithm.startsWith('SHA-256') ? 'sha256' : 'md5';
  const h = (s: string) => createHash(hashName).update(s, 'utf8').digest('hex');
  let ha1 = h(`${d.username}:${d.realm}:${d.password}`);
  if (d.algorithm.endsWith('-sess')) ha1 = h(`${ha1}:${d.nonce}:${d.cnonce}`);
  const ha2 = h(`${d.method}:${d.uri}`);
  return h(`${ha1}:${d.nonce}:${d.nc}:${d.cnonce}:${d.qop}:${ha2}`);
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
