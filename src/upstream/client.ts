// The upstream HTTP client: keep-alive pools, pre-emptive Digest auth (one round trip in the
// steady state), retries with full-jitter backoff, and decoding into normalized resources.
// Credentials are bound to their origin: a link is fetched only on base_url's origin or one of the
// source's allowed_origins, never downgraded from https to http; anything else is refused before a
// socket is opened or an Authorization computed (another origin would choose the realm and nonce
// and receive a valid Digest response: an offline password-guessing oracle).
import type { Logger } from 'pino';
import { backoffDelay, parseRetryAfter, sleep } from '../backoff.js';
import type { SourceConfig } from '../config/types.js';
import {
  DecodeError,
  FeedsyncError,
  UpstreamAuthError,
  UpstreamHttpError,
  UpstreamRefusedError,
  UpstreamTransportError,
  errorMessage,
  isRetryableStatus,
} from '../core/errors.js';
import { cut } from '../core/bounded-text.js';
import type { PipelineEvents } from '../core/events.js';
import { createConnections, type Route } from './connections.js';
import { decodeBody, type LinkRelMapper } from './decode.js';
import {
  DigestChallengeError,
  DigestSession,
  DigestTooWeakError,
  parseDigestChallenge,
  type DigestChallenge,
  type DigestPolicy,
} from './digest.js';
import type { Representation } from '../core/resource.js';
import { abortReason, DEFAULT_MAX_BODY_BYTES, send, type RawResponse } from './transport.js';

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
  /**
   * The source's base_url: its origin is where the credentials go, its scheme the floor (an https
   * base_url never lets a link go to http). Absent (tests, tools): the first URL requested binds
   * the client the same way.
   */
  baseUrl?: string;
  /** Origins (`scheme://host:port`) besides base_url's that links may point to; credentials go there too. */
  allowedOrigins?: readonly string[];
  /** Largest response body accepted, on the wire and decoded (absent: transport's default, 8 MiB). */
  maxBodyBytes?: number;
  /** Forward proxy (http(s) URL, may carry user:password). Absent: HTTPS_PROXY / HTTP_PROXY / NO_PROXY. */
  proxy?: string;
  /** The weakest Digest answered (sources[].digest_min, require_qop); absent: every form. */
  digest?: DigestPolicy;
  /** PEM CA bundle that replaces the default trust store for this source's upstream TLS. */
  caFile?: string;
  /** PEM client certificate and key (mTLS); both or neither. */
  certFile?: string;
  keyFile?: string;
}

/** The options every client of a configured source gets from its config. */
export function sourceClientOptions(
  source: SourceConfig,
): Omit<UpstreamClientOptions, 'retry' | 'connections' | 'events' | 'logger' | 'linkRel'> {
  return {
    source: source.name,
    username: source.username,
    password: source.password,
    format: source.format,
    timeoutMs: source.timeout_ms,
    compression: source.compression,
    baseUrl: source.base_url,
    allowedOrigins: source.allowed_origins,
    maxBodyBytes: source.max_body_bytes,
    proxy: source.proxy,
    digest: { min: source.digest_min, requireQop: source.require_qop },
    caFile: source.ca_file,
    certFile: source.cert_file,
    keyFile: source.key_file,
  };
}

/** 404 and 410 both say the resource is gone (RFC 9110 §15.5.11: 410 is 404 made permanent). */
/** `bytes`: the body's size, content codings undone (what a page's byte budget counts). */
export type FetchResult =
  { status: 200; url: string; resource: Representation; bytes: number } | { status: 404 | 410; url: string };

export interface UpstreamClient {
  /**
   * `maxBodyBytes`: a cap for this request below the source's max_body_bytes (a page budget's
   * first reservation); a body over it is a BodyOverCapError, neither counted nor retried.
   */
  get(
    url: string,
    opts: { kind: 'feed' | 'subject'; signal?: AbortSignal; maxBodyBytes?: number },
  ): Promise<FetchResult>;
  /** Requests made and 401s received so far (for the benchmark). */
  stats(): { requests: number; unauthorized: number };
  close(): Promise<void>;
}

const ACCEPT = { json: 'application/json', xml: 'application/xml' } as const;
/** A stale nonce may be re-challenged, but never in a loop. */
const MAX_AUTH_ROUNDS = 3;

interface Origin {
  /** Direct or through a proxy; see connections.ts. */
  route: Route;
  digest: DigestSession;
  /** Whether the RFC 2069 (no qop) warning was logged for this origin. */
  warnedNoQop: boolean;
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
  // Bounded: base_url's origin and the allowed ones are the only keys `target` lets through.
  const origins = new Map<string, Origin>();
  const counters = { requests: 0, unauthorized: 0 };
  let closed = false;
  const connections = createConnections({
    source: opts.source,
    connections: opts.connections ?? 16,
    timeoutMs: opts.timeoutMs,
    proxy: opts.proxy,
    caFile: opts.caFile,
    certFile: opts.certFile,
    keyFile: opts.keyFile,
  });
  let home = opts.baseUrl !== undefined ? homeOf(opts.baseUrl, opts.source) : undefined;
  const allowed = new Set((opts.allowedOrigins ?? []).map((o) => originOf(o, opts.source)));

  /** The URL as a Target, or UpstreamRefusedError when it may not be fetched with our credentials. */
  function target(url: string): Target {
    const t = parseTarget(url);
    home ??= { origin: t.origin, https: t.origin.startsWith('https:'), display: t.origin };
    if (home.https && !t.origin.startsWith('https:')) {
      throw new UpstreamRefusedError(
        t.display,
        'insecure_link',
        `the link is http but base_url ${home.display} is https; ` +
          'feedsync never downgrades from https to http',
      );
    }
    if (t.origin !== home.origin && !allowed.has(t.origin)) {
      throw new UpstreamRefusedError(
        t.display,
        'foreign_origin',
        `${t.origin} is neither base_url's origin (${home.origin}) nor one of the allowed_origins ` +
          `of source ${opts.source}; ` +
          `if it is trusted with the source's credentials, add "${t.origin}" to sources[].allowed_origins`,
      );
    }
    return t;
  }

  function originFor(origin: string): Origin {
    let o = origins.get(origin);
    if (!o) {
      o = {
        route: connections.route(origin),
        digest: new DigestSession({ username: opts.username, password: opts.password }, opts.digest),
        warnedNoQop: false,
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
    cap: number | undefined,
  ): Promise<RawResponse> {
    const headers: Record<string, string> = { accept: ACCEPT[opts.format] };
    if (authorization) headers.authorization = authorization;
    counters.requests += 1;
    try {
      // Ready at once unless a proxy class is still loading (a proxied origin's first requests).
      const dispatcher = o.route.dispatcher ?? (await o.route.ready!);
      const res = await send(dispatcher, t.display, {
        path: t.path,
        headers,
        timeoutMs: opts.timeoutMs,
        signal,
        // Only successes are decoded; error bodies are drained so the socket can be reused.
        readBody: (status) => status >= 200 && status < 300,
        compression: opts.compression ?? true,
        maxBodyBytes: cap ?? opts.maxBodyBytes,
      });
      if (res.status === 401) counters.unauthorized += 1;
      emit(kind, String(res.status));
      return res;
    } catch (err) {
      if (!(err instanceof UpstreamTransportError)) throw err;
      emit(kind, err.code);
      throw o.route.via ? viaProxy(err, o.route.via) : err;
    }
  }

  /** A 401's challenge, adopted for the origin; UpstreamAuthError when it cannot or may not be answered. */
  function adoptChallenge(o: Origin, t: Target, header: string | string[] | undefined): DigestChallenge {
    let challenge: DigestChallenge;
    try {
      challenge = o.digest.onChallenge(header);
    } catch (err) {
      if (err instanceof DigestTooWeakError) {
        throw new UpstreamAuthError(
          t.display,
          `source ${opts.source} refuses the 401's challenges: ${err.message}`,
          false,
          'weak_digest',
        );
      }
      const detail = err instanceof DigestChallengeError ? err.message : errorMessage(err);
      throw new UpstreamAuthError(t.display, `cannot answer the 401: ${detail}`);
    }
    if (challenge.qop === undefined && !o.warnedNoQop) {
      o.warnedNoQop = true;
      opts.logger?.warn(
        { source: opts.source, origin: t.origin },
        'the server offers Digest only without qop (RFC 2069: no client nonce, no nonce count); ' +
          'answered; set require_qop: true on the source to refuse this form',
      );
    }
    return challenge;
  }

  /** GET with Digest handled: returns the first non-401 answer or throws UpstreamAuthError. */
  async function authenticatedGet(
    t: Target,
    kind: 'feed' | 'subject',
    signal: AbortSignal | undefined,
    cap: number | undefined,
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
      const res = await exchange(o, t, kind, auth?.header, signal, cap);
      if (res.status !== 401) {
        if (auth) o.digest.onAuthenticationInfo(res.headers['authentication-info']);
        return res;
      }
      let stale = false;
      if (o.digest.generation === basedOn) {
        // Our cached nonce (or no credentials at all) was refused: adopt the server's new challenge.
        // When the generation moved on, a concurrent request already did so: reuse its challenge.
        stale = adoptChallenge(o, t, res.headers['www-authenticate']).stale;
      } else {
        stale = isStale(res.headers['www-authenticate']);
      }
      // Credentials built from a fresh challenge were refused: the password is wrong. A
      // stale=true answer says the opposite, so it may re-challenge, but only boundedly.
      if (auth && fresh && stale && round >= MAX_AUTH_ROUNDS)
        throw new UpstreamAuthError(
          t.display,
          `the server answered stale=true to ${round} fresh nonces in a row: it does not accept the nonces it issues (a server-side problem, not the password)`,
          false,
        );
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
    cap: number | undefined,
  ): Promise<FetchResult> {
    const res = await authenticatedGet(t, kind, signal, cap);
    if (res.status === 404 || res.status === 410) return { status: res.status, url: t.display };
    if (res.status >= 200 && res.status < 300) {
      if (res.invalidUtf8) {
        opts.events?.emit('upstream:invalid-utf8', { source: opts.source, url: t.display });
        opts.logger?.warn(
          { source: opts.source, kind, url: cut(t.display) },
          'response is not valid UTF-8; invalid bytes replaced by U+FFFD',
        );
      }
      const contentType = headerValue(res.headers['content-type']);
      const resource = decodeBody(res.body, contentType, t.display, opts.format, { linkRel: opts.linkRel });
      return { status: 200, url: t.display, resource, bytes: res.bytes };
    }
    const retryable = isRetryableStatus(res.status);
    const retryAfterMs = retryable
      ? parseRetryAfter(res.headers['retry-after'], retry.retryAfterCapMs)
      : undefined;
    throw new UpstreamHttpError(t.display, res.status, statusDetail(res.status), retryAfterMs);
  }

  /** Reports a refusal (the client's own, send()'s or the decoder's): the one place that does. */
  function reported(err: unknown): unknown {
    if (err instanceof UpstreamRefusedError) {
      opts.events?.emit('upstream:refused', { source: opts.source, reason: err.reason, url: err.url });
    } else if (err instanceof UpstreamAuthError && err.refusal !== undefined) {
      opts.events?.emit('upstream:refused', { source: opts.source, reason: err.refusal, url: err.url });
    }
    return err;
  }

  return {
    async get(url, { kind, signal, maxBodyBytes: cap }) {
      if (closed)
        throw new FeedsyncError(
          `upstream client of source ${opts.source} is closed (GET ${stripUserinfoText(cut(url))})`,
          false,
        );
      let t: Target;
      try {
        t = target(url);
      } catch (err) {
        throw reported(err);
      }
      let lastError: unknown;
      for (let i = 0; i < retry.attempts; i++) {
        try {
          return await attempt(t, kind, signal, cap);
        } catch (err) {
          if (signal?.aborted) throw abortReason(signal);
          const sourceCap = opts.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
          if (
            cap !== undefined &&
            cap < sourceCap &&
            err instanceof UpstreamRefusedError &&
            err.reason === 'body_too_large'
          )
            throw new BodyOverCapError(t.display, cap);
          // Refusals are never retried here: they would be refused again.
          if (!isRetryable(err)) throw reported(err);
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
            url: cut(t.display),
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
      origins.clear();
      await connections.close();
    },
  };
}

/** The body is larger than the request's own cap (UpstreamClient.get's maxBodyBytes): ask again with more. */
export class BodyOverCapError extends Error {
  override name = 'BodyOverCapError';
  constructor(
    readonly url: string,
    readonly cap: number,
  ) {
    super(`body of GET ${url} is larger than the ${cap} bytes reserved for it`);
  }
}

function isStale(header: string | string[] | undefined): boolean {
  try {
    return parseDigestChallenge(header).stale;
  } catch {
    return false;
  }
}

function isRetryable(err: unknown): boolean {
  // Refused links and bodies would be refused again: the poller fails the page instead.
  if (err instanceof UpstreamAuthError || err instanceof UpstreamRefusedError) return false;
  return (
    err instanceof UpstreamTransportError ||
    err instanceof DecodeError ||
    (err instanceof UpstreamHttpError && err.retryable)
  );
}

/** `scheme://host:port` as URL.origin writes it (the config already normalizes them). */
function originOf(allowed: string, source: string): string {
  try {
    return new URL(allowed).origin;
  } catch {
    throw new FeedsyncError(
      `allowed_origins of source ${source}: ${JSON.stringify(allowed)} is not a URL`,
      false,
    );
  }
}

/** What a link may be compared with: base_url's origin and whether it is https. */
function homeOf(baseUrl: string, source: string): { origin: string; https: boolean; display: string } {
  let url: URL;
  try {
    url = new URL(baseUrl);
  } catch {
    throw new FeedsyncError(`base_url of source ${source} is not a URL`, false);
  }
  return { origin: url.origin, https: url.protocol === 'https:', display: url.origin };
}

function parseTarget(url: string): Target {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    const text = JSON.stringify(stripUserinfoText(cut(url)));
    throw new UpstreamRefusedError(text, 'unusable_link', 'the link is not a URL');
  }
  // URLs here carry no credentials, but if one did it must not reach an error or a log.
  parsed.username = '';
  parsed.password = '';
  parsed.hash = '';
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new UpstreamRefusedError(
      parsed.href,
      'unusable_link',
      `only http and https links can be fetched, not ${parsed.protocol}`,
    );
  }
  return { display: parsed.href, origin: parsed.origin, path: `${parsed.pathname}${parsed.search}` };
}

/** The transport error, saying which proxy the request went through. */
function viaProxy(err: UpstreamTransportError, via: string): UpstreamTransportError {
  const prefix = ` on GET ${cut(err.url)}: `;
  const at = err.message.indexOf(prefix);
  const detail = at < 0 ? err.message : err.message.slice(at + prefix.length);
  return new UpstreamTransportError(err.url, err.code, `${detail}${via}`);
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
