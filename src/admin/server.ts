// The admin listener (docs/admin.md): the API under /api/v1 and, at `/`, the console. Loaded only
// when `admin.enabled` (src/daemon.ts imports it lazily). Plain node:http, as the operations
// server: a dozen routes do not justify a framework.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import type { Registry } from 'prom-client';
import { SourceHeldError } from '../commands/cursor.js';
import { CommandError } from '../commands/errors.js';
import { collectSecrets } from '../config/redact.js';
import { ConfigError, FeedsyncError, errorMessage } from '../core/errors.js';
import type { Logger } from '../observability/logger.js';
import { createLogRate } from '../observability/log-rate.js';
import { listen } from '../observability/listen.js';
import { adminMetrics } from '../observability/metrics.js';
import { createTextRedactor } from '../observability/redact-text.js';
import { ReplayRefused } from '../queue/sink-positions.js';
import { AdminError, findRoute, routes, type AdminContext, type AdminRequest } from './api.js';
import { loadConsoleAssets } from './console-assets.js';
import {
  CSRF_HEADER,
  Sessions,
  crossOrigin,
  csrfMatches,
  overHttps,
  sessionCookie,
  type Session,
} from './sessions.js';
import type { AdminTokens, Role } from './tokens.js';

const { createServer } = createRequire(import.meta.url)('node:http') as typeof import('node:http');

/** Request bodies larger than this are refused (413) before they are read further. */
export const MAX_BODY_BYTES = 64 * 1024;

export interface AdminServerOptions extends AdminContext {
  host: string;
  /** 0 = any free port (tests). */
  port: number;
  tokens: AdminTokens;
  registry: Registry;
  logger: Logger;
}

export interface RunningAdminServer {
  port: number;
  /** Idempotent. */
  close(): Promise<void>;
}

/** The `outcome` label of feedsync_admin_requests_total, by status. */
function outcomeOf(status: number): string {
  if (status < 400) return 'ok';
  const named: Record<number, string> = {
    401: 'unauthorized',
    403: 'forbidden',
    404: 'not_found',
    409: 'conflict',
    413: 'too_large',
  };
  return named[status] ?? (status < 500 ? 'invalid' : 'error');
}

export async function startAdminServer(opts: AdminServerOptions): Promise<RunningAdminServer> {
  const metrics = adminMetrics(opts.registry);
  // Every answer is scrubbed of the config's credentials: an error text from a sink or a
  // receiver may quote a URL or a secret, and the console must not show it.
  const scrub = createTextRedactor(collectSecrets(opts.config));
  const log = opts.logger.child({ component: 'admin' });
  const sessions = new Sessions(opts.tokens.sessionKey);
  const refusedLogins = createLogRate();
  const assets = loadConsoleAssets();
  // Zero series from the start: a rate() over the first refusal then sees it.
  for (const r of routes)
    for (const o of ['ok', 'unauthorized', 'forbidden']) metrics.requests.labels(r.path, o).inc(0);

  const server = createServer((req, res) => {
    let route = 'unmatched';
    handle(req, res, (r) => (route = r))
      .catch((err: unknown) => {
        const { status, body, headers } = answerFor(err);
        if (status >= 500) log.error({ err: errorMessage(err), route }, 'admin request failed');
        if (!res.headersSent) sendJson(res, status, body, headers);
        else res.destroy();
      })
      .finally(() => metrics.requests.labels(route, outcomeOf(res.statusCode)).inc());
  });

  async function handle(req: IncomingMessage, res: ServerResponse, named: (route: string) => void) {
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://admin.invalid');
    } catch {
      throw new AdminError(400, 'malformed request URL');
    }
    const method = req.method ?? 'GET';
    const asset = method === 'GET' || method === 'HEAD' ? assets.get(url.pathname) : undefined;
    if (asset) {
      named('console');
      res.writeHead(200, { ...securityHeaders, 'Content-Type': asset.type });
      return void res.end(asset.body);
    }
    if (url.pathname === '/login' || url.pathname === '/logout') {
      named(url.pathname);
      if (method !== 'POST') {
        res.setHeader('Allow', 'POST');
        throw new AdminError(405, 'method not allowed');
      }
      return url.pathname === '/login' ? login(req, res) : logout(req, res);
    }
    const found = findRoute(method, url.pathname);
    if (!found) throw new AdminError(404, 'not found');
    if ('allowed' in found) {
      res.setHeader('Allow', found.allowed.join(', '));
      throw new AdminError(405, 'method not allowed');
    }
    const { route, params } = found;
    named(route.path);
    const caller = authenticate(req);
    if (!caller)
      throw new AdminError(
        401,
        'a valid bearer token is required (Authorization: Bearer <token>), or a console session',
        {},
        { 'WWW-Authenticate': 'Bearer realm="feedsync admin"' },
      );
    if (route.changes && caller.session) refuseForgery(req, caller.session);
    if (route.changes && caller.role !== 'write')
      throw new AdminError(403, 'the read-only token may not change anything');
    const body = route.method === 'GET' ? undefined : await readJsonBody(req);
    const request: AdminRequest = {
      params,
      query: url.searchParams,
      body,
      role: caller.role,
      csrf: caller.session?.csrf,
    };
    const answer = await route.handle(opts, request);
    if (answer.audit) {
      const a = answer.audit;
      if (!a.dry_run) metrics.changes.labels(a.action).inc();
      // Which token (its label, never the token), what, how many.
      log.info(
        {
          token: caller.role,
          via: caller.session ? 'console' : 'bearer',
          action: a.action,
          dry_run: a.dry_run,
          count: a.count,
          target: a.target,
        },
        `admin: ${a.action}${a.dry_run ? ' (dry run)' : ''} of ${a.count}`,
      );
    }
    sendJson(res, answer.status, answer.body);
  }

  /**
   * Who is asking: a bearer token (API clients; no cookie, so no CSRF to fear) wins over a
   * console session; a request with a wrong token is not rescued by a cookie.
   */
  function authenticate(req: IncomingMessage): { role: Role; session?: Session } | undefined {
    const header = req.headers.authorization;
    if (header !== undefined) {
      const role = bearerRole(header);
      return role && { role };
    }
    const session = sessions.of(req);
    return session && { role: session.role, session };
  }

  function bearerRole(header: string): Role | undefined {
    if (header.length > 1024) return undefined;
    const space = header.indexOf(' ');
    if (space < 0 || header.slice(0, space).toLowerCase() !== 'bearer') return undefined;
    return opts.tokens.roleOf(header.slice(space + 1).trim());
  }

  /** A cookie session's change must come from the console's own origin and echo its CSRF token. */
  function refuseForgery(req: IncomingMessage, session: Session): void {
    if (crossOrigin(req)) throw new AdminError(403, 'refused: the request comes from another origin');
    if (!csrfMatches(req, session))
      throw new AdminError(403, `refused: missing or wrong CSRF token (the ${CSRF_HEADER} header)`);
  }

  /** `POST /login {"token"}`: a session for the token's role in a cookie; the CSRF token in the answer. */
  async function login(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (crossOrigin(req)) throw new AdminError(403, 'refused: the request comes from another origin');
    const body = await readJsonBody(req);
    const token = (body as { token?: unknown }).token;
    const role =
      typeof token === 'string' && token.length <= 1024 ? opts.tokens.roleOf(token.trim()) : undefined;
    if (!role) {
      // Once a minute at most, with how many were left out: guessing must not flood the log.
      const admitted = refusedLogins.admit('login');
      if (admitted) log.warn({ repeated: admitted.repeated }, 'admin: console login refused (wrong token)');
      throw new AdminError(401, 'wrong token');
    }
    const { cookie, session } = sessions.create(role);
    log.info({ token: role, via: 'console' }, 'admin: console login');
    sendJson(res, 200, { role, csrf: session.csrf }, { 'Set-Cookie': sessionCookie(cookie, overHttps(req)) });
  }

  async function logout(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const session = sessions.of(req);
    if (session) {
      refuseForgery(req, session);
      sessions.revoke(session);
    }
    sendJson(res, 200, { logged_out: true }, { 'Set-Cookie': sessionCookie('', overHttps(req), 0) });
  }

  function sendJson(
    res: ServerResponse,
    status: number,
    value: unknown,
    headers: Record<string, string> = {},
  ) {
    res.writeHead(status, {
      ...securityHeaders,
      ...headers,
      'Content-Type': 'application/json; charset=utf-8',
    });
    res.end(scrub(JSON.stringify(value)));
  }

  const listening = await listen(server, opts.host, opts.port);
  const { port } = listening;
  log.info({ host: opts.host, port }, 'admin API listening');
  return listening;
}

/**
 * Sent with every answer: nothing here is cached, framed, sniffed or leaks its URL; the console
 * runs only its own files (no inline script or style, no other origin).
 */
const securityHeaders: Record<string, string> = {
  'Cache-Control': 'no-store',
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'X-Frame-Options': 'DENY',
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Resource-Policy': 'same-origin',
  'Content-Security-Policy':
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
    "object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
};

/** The status and JSON body an error answers with; 500s say nothing of the cause (it is logged). */
function answerFor(err: unknown): { status: number; body: unknown; headers?: Record<string, string> } {
  if (err instanceof AdminError)
    return { status: err.status, body: { error: err.message, ...err.extra }, headers: err.headers };
  if (err instanceof SourceHeldError)
    return { status: 409, body: { error: err.message, holder: err.holder } };
  if (err instanceof ReplayRefused || err instanceof CommandError)
    return { status: 409, body: { error: err.message } };
  if (err instanceof ConfigError) return { status: 400, body: { error: err.message } };
  if (err instanceof FeedsyncError)
    return err.retryable
      ? { status: 503, body: { error: `try again: ${err.message}` } }
      : { status: 400, body: { error: err.message } };
  return { status: 500, body: { error: 'internal error (see the feedsync log)' } };
}

/** The request's JSON body, at most MAX_BODY_BYTES; an empty body is `{}`. */
async function readJsonBody(req: IncomingMessage): Promise<unknown> {
  const type = req.headers['content-type'] ?? '';
  const declared = Number(req.headers['content-length'] ?? 0);
  if (declared > MAX_BODY_BYTES) {
    req.resume();
    throw new AdminError(413, `request body over ${MAX_BODY_BYTES} bytes`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) {
      req.resume();
      throw new AdminError(413, `request body over ${MAX_BODY_BYTES} bytes`);
    }
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') return {};
  if (!/^application\/json\b/i.test(type))
    throw new AdminError(415, 'the request body must be JSON (Content-Type: application/json)');
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new AdminError(400, `request body is not valid JSON: ${errorMessage(err)}`);
  }
}
