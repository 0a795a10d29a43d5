// Console sessions: a login with a token gives an HttpOnly, SameSite=Strict cookie naming the
// role, its expiry and a random id, signed (HMAC-SHA256) with a key derived from the token files,
// and a CSRF token bound to that id which every change request must echo in a header. The token
// itself is never stored in the browser. Any process with the same token files accepts the
// cookie (the replicas behind one Service), and changing a token ends every session. A logout
// clears the cookie and revokes its id in the process that served it.
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Role } from './tokens.js';

export const SESSION_COOKIE = 'feedsync_admin';
export const CSRF_HEADER = 'x-csrf-token';
/** A session lasts this long from its login, used or not. */
export const SESSION_TTL_MS = 8 * 60 * 60 * 1000;
/** Revoked ids remembered at most (each only until its session would have expired anyway). */
const MAX_REVOKED = 10_000;

export interface Session {
  role: Role;
  /** The random id the cookie carries. */
  id: string;
  csrf: string;
  expiresAt: number;
}

const ROLES: readonly Role[] = ['write', 'read'];

export class Sessions {
  private readonly revoked = new Map<string, number>();

  /** `key`: the signing key, the same in every process with the same tokens (AdminTokens.sessionKey). */
  constructor(
    private readonly key: Buffer,
    private readonly now: () => number = Date.now,
  ) {}

  /** A new session: the cookie's value and the session. */
  create(role: Role): { cookie: string; session: Session } {
    const id = randomBytes(24).toString('base64url');
    const expiresAt = this.now() + SESSION_TTL_MS;
    const body = `${role}.${expiresAt}.${id}`;
    return { cookie: `${body}.${this.mac(body)}`, session: this.session(role, id, expiresAt) };
  }

  /** The live session of the request's cookie: signed by this key, not expired, not revoked. */
  of(req: IncomingMessage): Session | undefined {
    const value = cookieValue(req.headers.cookie, SESSION_COOKIE);
    const parts = value?.split('.');
    if (parts?.length !== 4) return undefined;
    const [role, expires, id, mac] = parts as [Role, string, string, string];
    if (!equal(mac, this.mac(`${role}.${expires}.${id}`))) return undefined;
    const expiresAt = Number(expires);
    if (!ROLES.includes(role) || !(expiresAt > this.now()) || this.revoked.has(id)) return undefined;
    return this.session(role, id, expiresAt);
  }

  /** Ends the session here (other processes accept its cookie until it expires; the browser drops it). */
  revoke(session: Session): void {
    const now = this.now();
    for (const [id, until] of this.revoked) if (until <= now) this.revoked.delete(id);
    this.revoked.set(session.id, session.expiresAt);
    while (this.revoked.size > MAX_REVOKED) this.revoked.delete(this.revoked.keys().next().value as string);
  }

  private session(role: Role, id: string, expiresAt: number): Session {
    return { role, id, expiresAt, csrf: this.mac(`csrf.${id}`) };
  }

  private mac(text: string): string {
    return createHmac('sha256', this.key).update(text).digest('base64url');
  }
}

/** Equal texts, compared in constant time over their digests. */
function equal(a: string, b: string): boolean {
  const digest = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(digest(a), digest(b));
}

/** Whether the request echoes the session's CSRF token (compared in constant time). */
export function csrfMatches(req: IncomingMessage, session: Session): boolean {
  const sent = req.headers[CSRF_HEADER];
  return typeof sent === 'string' && sent.length <= 200 && equal(sent, session.csrf);
}

/** The request came over https: TLS to this listener, or a proxy in front saying so. */
export function overHttps(req: IncomingMessage): boolean {
  const forwarded = req.headers['x-forwarded-proto'];
  const proto = (Array.isArray(forwarded) ? forwarded[0] : forwarded)?.split(',')[0]?.trim().toLowerCase();
  return proto === 'https' || (req.socket as { encrypted?: boolean }).encrypted === true;
}

/**
 * A browser's request from a page of another origin: its Origin header names another
 * scheme://host than this request's own, or Fetch Metadata says cross-site.
 */
export function crossOrigin(req: IncomingMessage): boolean {
  if (req.headers['sec-fetch-site'] === 'cross-site') return true;
  const origin = req.headers.origin;
  if (origin === undefined) return false;
  const own = `${overHttps(req) ? 'https' : 'http'}://${req.headers.host ?? ''}`;
  return origin.toLowerCase() !== own.toLowerCase();
}

export function sessionCookie(value: string, secure: boolean, maxAgeS = SESSION_TTL_MS / 1000): string {
  return `${SESSION_COOKIE}=${value}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAgeS}${secure ? '; Secure' : ''}`;
}

function cookieValue(header: string | undefined, name: string): string | undefined {
  if (header === undefined || header.length > 8192) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}
