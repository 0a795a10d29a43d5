// Console sessions: a login with a token gives a random session id in an HttpOnly, SameSite=Strict
// cookie, and a CSRF token bound to that session which every change request must echo in a
// header. The token itself is never stored in the browser. Sessions live in this process only
// (a restart logs everyone out) and expire; their number is bounded.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Role } from './tokens.js';

export const SESSION_COOKIE = 'feedsync_admin';
export const CSRF_HEADER = 'x-csrf-token';
/** A session lasts this long from its login, used or not. */
export const SESSION_TTL_MS = 8 * 60 * 60 * 1000;
/** The oldest session is dropped past this many (logins are cheap to repeat, memory is not). */
const MAX_SESSIONS = 1000;

export interface Session {
  role: Role;
  csrf: string;
  expiresAt: number;
}

export class Sessions {
  private readonly byId = new Map<string, Session>();

  constructor(private readonly now: () => number = Date.now) {}

  create(role: Role): { id: string; session: Session } {
    const id = randomBytes(32).toString('base64url');
    const session = {
      role,
      csrf: randomBytes(32).toString('base64url'),
      expiresAt: this.now() + SESSION_TTL_MS,
    };
    this.byId.set(id, session);
    // Insertion order is login order: the first key is the oldest session.
    while (this.byId.size > MAX_SESSIONS) this.byId.delete(this.byId.keys().next().value as string);
    return { id, session };
  }

  /** The live session of the request's cookie, if any. */
  of(req: IncomingMessage): { id: string; session: Session } | undefined {
    const id = cookieValue(req.headers.cookie, SESSION_COOKIE);
    if (id === undefined) return undefined;
    const session = this.byId.get(id);
    if (!session) return undefined;
    if (session.expiresAt <= this.now()) {
      this.byId.delete(id);
      return undefined;
    }
    return { id, session };
  }

  delete(id: string): void {
    this.byId.delete(id);
  }
}

/** Whether the request echoes the session's CSRF token (compared in constant time). */
export function csrfMatches(req: IncomingMessage, session: Session): boolean {
  const sent = req.headers[CSRF_HEADER];
  if (typeof sent !== 'string' || sent.length > 200) return false;
  const digest = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(digest(sent), digest(session.csrf));
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

export function sessionCookie(id: string, secure: boolean, maxAgeS = SESSION_TTL_MS / 1000): string {
  return `${SESSION_COOKIE}=${id}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAgeS}${secure ? '; Secure' : ''}`;
}

function cookieValue(header: string | undefined, name: string): string | undefined {
  if (header === undefined || header.length > 8192) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}
