// The upstream HTTP client: keep-alive pools, pre-emptive Digest auth (one round trip in the
// steady state), retries with full-jitter backoff, and decoding into normalized resources.
import type { Logger } from 'pino';
import { Pool } from './undici-dispatchers.js';
import { backoffDelay, parseRetryAfter, sleep } from '../backoff.js';
import {
  DecodeError,
  FeedsyncError,
  UpstreamAuthError,
  UpstreamHttpError,
  UpstreamTransportError,
  errorMessage,
  isRetryableStatus,
} from '../core/errors.js';
import type { PipelineEvents } from '../core/events.js';
import { decodeBody, type LinkRelMapper } from './decode.js';
import { DigestChallengeError, DigestSession, parseDigestChallenge } from './digest.js';
import type { Representation } from '../core/resource.js';
import { abortReason, send, type RawResponse } from './transport.js';

export interface UpstreamClientOptions {
  /** Source name, for errors/logs/events. */
  source: string;
  username: string;
  password: string;
  /** Accept header. */
  format: 'json' | 'xml';
  /** Per request (headers + body). */
  timeoutMs: number;
  /** Default 5 attempts, 200 ms base, 30000 ms max, Retry-After capped at 60000 ms. */
  retry?: { attempts: number; baseMs: number; maxMs: number; retryAfterCapMs?: number };
  /** Keep-alive pool size per origin (default 16). */
  connections?: number;
  /** Emits 'http:response' for every exchange, 401 challenges included. */
  events?: PipelineEvents;
  logger?: Logger;
  /** Passed to the decoder. */
  linkRel?: LinkRelMapper;
  /** Ask for gzip/deflate/br answers and decode them (default true). */
  compression?: boolean;
}

/** 404 and 410 both say the resource is gone (RFC 9110 §15.5.11: 410 is 404 made permanent). */
export type FetchResult =
  { status: 200; url: string; resource: Representation } | { status: 404 | 410; url: string };

export interface UpstreamClient {
  get(url: string, opts: { kind: 'feed' | 'subject'; signal?: AbortSignal }): Promise<FetchResult>;
  /** Requests made and 401s received so far (for the benchmark). */
  stats(): { requests: number; unauthorized: number };
  close(): Promise<void>;
}

const ACCEPT = { json: 'application/json', xml: 'application/xml' } as const;
/** A stale nonce may be re-challenged, but never in a loop. */
const MAX_AUTH_ROUNDS = 3;

interface Origin {
  pool: Pool;
  digest: DigestSession;
}

interface Target {
  /** The URL without userinfo: safe for errors and logs. */
  display: string;
  origin: string;
  path: string;
}

export function createUpstreamClient(opts: UpstreamClientOptions): UpstreamClient {
  const retry = {
    attempts: Math.max(1, opts.retry?.attempts ?? 5),
    baseMs: opts.retry?.baseMs ?? 200,
    maxMs: opts.retry?.maxMs ?? 30_000,
    retryAfterCapMs: opts.retry?.retryAfterCapMs ?? 60_000,
  };
  const origins = new Map<string, Origin>();
  const counters = { requests: 0, unauthorized: 0 };
  let closed = false;

  function originFor(origin: string): Origin {
    let o = origins.get(origin);
    if (!o) {
      o = {
        pool: new Pool(origin, {
          connections: opts.connections ?? 16,
          keepAliveTimeout: 30_000,
          // Backstops; the per-request AbortSignal deadline is what normally fires.
          headersTimeout: opts.timeoutMs,
          bodyTimeout: opts.timeoutMs,
        }),
        digest: new DigestSession({ username: opts.username, password: opts.password }),
      };
      origins.set(origin, o);
    }
    return o;
  }

  function emit(kind: 'feed' | 'subject', code: string): void {
    opts.events?.emit('http:response', { source: opts.source, kind, code });
  }

  /** One HTTP request, counted and reported. */
  async function exchange(
    o: Origin,
    t: Target,
    kind: 'feed' | 'subject',
    authorization: string | undefined,
    signal: AbortSignal | undefined,
  ): Promise<RawResponse> {
    const headers: Record<string, string> = { accept: ACCEPT[opts.format] };
    if (authorization) headers.authorization = authorization;
    counters.requests += 1;
    try {
      const res = await send(o.pool, t.display, {
        path: t.path,
        headers,
        timeoutMs: opts.timeoutMs,
        signal,
        // Only successes are decoded; error bodies are drained so the socket can be reused.
        readBody: (status) => status >= 200 && status < 300,
        compression: opts.compression ?? true,
      });
      if (res.status === 401) counters.unauthorized += 1;
      emit(kind, String(res.status));
      return res;
    } catch (err) {
      if (err instanceof UpstreamTransportError) emit(kind, err.code);
      throw err;
    }
  }

  /** GET with Digest handled: returns the first non-401 answer or throws UpstreamAuthError. */
  async function authenticatedGet(
    t: Target,
    kind: 'feed' | 'subject',
    signal: AbortSignal | undefined,
  ): Promise<RawResponse> {
    const o = originFor(t.origin);
    // The challenge generation our credentials came from (or, without credentials, the one seen
    // before sending): a 401 only replaces the challenge if nobody has replaced it meanwhile.
    let basedOn = o.digest.generation;
    let auth = o.digest.authorize('GET', t.path);
    if (auth) basedOn = auth.generation;
    // Whether `auth` was built from a challenge received while serving this very request.
    let fresh = false;
    for (let round = 1; ; round++) {
      const res = await exchange(o, t, kind, auth?.header, signal);
      if (res.status !== 401) {
        if (auth) o.digest.onAuthenticationInfo(res.headers['authentication-info']);
        return res;
      }
      let stale = false;
      if (o.digest.generation === basedOn) {
        // Our cached nonce (or no credentials at all) was refused: adopt the server's new challenge.
        // When the generation moved on, a concurrent request already did so: reuse its challenge.
        try {
          stale = o.digest.onChallenge(res.headers['www-authenticate']).stale;
        } catch (err) {
          const detail = err instanceof DigestChallengeError ? err.message : errorMessage(err);
          throw new UpstreamAuthError(t.display, `cannot answer the 401: ${detail}`);
        }
      } else {
        stale = isStale(res.headers['www-authenticate']);
      }
      // Credentials built from a fresh challenge were refused: the password is wrong. A
      // stale=true answer says the opposite, so it may re-challenge, but only boundedly.
      if ((auth && fresh && !stale) || round >= MAX_AUTH_ROUNDS) {
        throw new UpstreamAuthError(t.display, 'credentials rejected after a fresh digest challenge');
      }
      fresh = true;
      auth = o.digest.authorize('GET', t.path);
      basedOn = auth?.generation ?? basedOn;
    }
  }

  /** One attempt: a decoded result, or a typed error saying whether to retry. */
  async function attempt(
    t: Target,
    kind: 'feed' | 'subject',
    signal: AbortSignal | undefined,
  ): Promise<FetchResult> {
    const res = await authenticatedGet(t, kind, signal);
    if (res.status === 404 || res.status === 410) return { status: res.status, url: t.display };
    if (res.status >= 200 && res.status < 300) {
      const contentType = headerValue(res.headers['content-type']);
      const resource = decodeBody(res.body, contentType, t.display, opts.format, { linkRel: opts.linkRel });
      return { status: 200, url: t.display, resource };
    }
    const retryable = isRetryableStatus(res.status);
    const retryAfterMs = retryable
      ? parseRetryAfter(res.headers['retry-after'], retry.retryAfterCapMs)
      : undefined;
    throw new UpstreamHttpError(t.display, res.status, statusDetail(res.status), retryAfterMs);
  }

  return {
    async get(url, { kind, signal }) {
      if (closed)
        throw new FeedsyncError(
          `upstream client of source ${opts.source} is closed (GET ${stripUserinfoText(url)})`,
          false,
        );
      const t = target(url);
      let lastError: unknown;
      for (let i = 0; i < retry.attempts; i++) {
        try {
          return await attempt(t, kind, signal);
        } catch (err) {
          if (signal?.aborted) throw abortReason(signal);
          if (!isRetryable(err)) throw err;
          lastError = err;
        }
        if (i === retry.attempts - 1) break;
        const backoff = backoffDelay(i, retry.baseMs, retry.maxMs);
        const asked = lastError instanceof UpstreamHttpError ? (lastError.retryAfterMs ?? 0) : 0;
        const delayMs = Math.max(backoff, asked);
        opts.logger?.warn(
          {
            source: opts.source,
            kind,
            url: t.display,
            attempt: i + 1,
            delayMs,
            err: errorMessage(lastError),
          },
          'upstream request failed; retrying',
        );
        if (!(await sleep(delayMs, signal))) throw abortReason(signal!);
      }
      throw lastError;
    },
    stats() {
      return { ...counters };
    },
    async close() {
      if (closed) return;
      closed = true;
      const pools = [...origins.values()].map((o) => o.pool);
      origins.clear();
      // Every pool is closed even when one fails; the first failure is reported afterwards.
      const results = await Promise.allSettled(pools.map((p) => p.close()));
      const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed) throw failed.reason;
    },
  };
}

function isStale(header: string | string[] | undefined): boolean {
  try {
    return parseDigestChallenge(header).stale;
  } catch {
    return false;
  }
}

function isRetryable(err: unknown): boolean {
  if (err instanceof UpstreamAuthError) return false;
  return (
    err instanceof UpstreamTransportError ||
    err instanceof DecodeError ||
    (err instanceof UpstreamHttpError && err.retryable)
  );
}

function target(url: string): Target {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new FeedsyncError(`invalid upstream URL ${JSON.stringify(stripUserinfoText(url))}`, false);
  }
  // URLs here carry no credentials, but if one did it must not reach an error or a log.
  parsed.username = '';
  parsed.password = '';
  parsed.hash = '';
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new FeedsyncError(`unsupported protocol in upstream URL ${parsed.href}`, false);
  }
  return { display: parsed.href, origin: parsed.origin, path: `${parsed.pathname}${parsed.search}` };
}

function stripUserinfoText(url: string): string {
  return url.replace(/\/\/[^/@]*@/, '//');
}

function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

function statusDetail(status: number): string {
  if (status === 429) return 'rate limited';
  if (status === 408) return 'request timeout';
  if (status >= 500) return 'server error';
  return 'client error';
}
