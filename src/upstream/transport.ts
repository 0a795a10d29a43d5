// One GET over a keep-alive pool, with a deadline covering headers AND body. Every failure comes
// out as an UpstreamTransportError built from the error's code and message only: undici errors
// are never passed on as `cause`, so nothing of the request (its Authorization header) can leak.
// A body over maxBodyBytes, on the wire or once decoded, is an UpstreamRefusedError instead.
import type { Dispatcher } from 'undici';
import { BodyTooLargeError, exchangeFailure, NoResponseError, receive, type Received } from './dispatch.js';
import { Client } from './undici-dispatchers.js';
import { DecodeError, UpstreamRefusedError, UpstreamTransportError } from '../core/errors.js';
import { CharsetError, decodeText, type DecodedText } from './charset.js';
import {
  ACCEPT_ENCODING,
  ContentEncodingError,
  DecodedTooLargeError,
  decodeContentEncoding,
} from './content-encoding.js';

/** maxBodyBytes when the caller gives none: the default of a source's `max_body_bytes`. */
export const DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024;

export interface RawResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** Size of the body in bytes, content codings undone (0 when not read). */
  bytes: number;
  /** The body held bytes that are not valid UTF-8 (each replaced by U+FFFD). */
  invalidUtf8?: boolean;
}

export interface SendOptions {
  /** Request path + query. */
  path: string;
  headers: Record<string, string>;
  timeoutMs: number;
  signal?: AbortSignal;
  /** Whether the body is needed (false: drained and discarded, e.g. a 401's). */
  readBody: (status: number) => boolean;
  /** Send Accept-Encoding and decode gzip/deflate/br bodies. */
  compression?: boolean;
  /**
   * Largest body accepted, on the wire (kept or drained alike) and decoded; over it:
   * UpstreamRefusedError body_too_large. Default DEFAULT_MAX_BODY_BYTES.
   */
  maxBodyBytes?: number;
}

/** The keep-alive pool `send` uses; its idle count tells whether a request reuses a connection. */
export interface PooledDispatcher extends Dispatcher {
  readonly stats: { readonly free: number };
  /** A one-off connection like the pool's (same TLS settings), for the keep-alive retry; default: a plain Client. */
  fresh?(): Dispatcher;
}

/** The reason an abort was requested, as something throwable. */
export function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError');
}

export async function send(pool: PooledDispatcher, url: string, opts: SendOptions): Promise<RawResponse> {
  if (opts.signal?.aborted) throw abortReason(opts.signal);
  const headers = opts.compression ? { ...opts.headers, 'accept-encoding': ACCEPT_ENCODING } : opts.headers;
  const request: Dispatcher.DispatchOptions = { method: 'GET', path: opts.path, headers };
  // An idle connection is there to be reused: the request goes out on one.
  const reusing = pool.stats.free > 0;
  // One deadline for both tries: the keep-alive retry below must not extend it.
  const deadline = Date.now() + opts.timeoutMs;
  try {
    try {
      return await exchange(pool, request, opts, url, deadline);
    } catch (err) {
      if (!(reusing && closedBeforeResponse(err))) throw err;
      // The server closed the idle keep-alive connection as we reused it (its idle timeout raced
      // our request): it processed nothing, and a GET is idempotent. Send it again at once on a
      // connection of its own, so another stale idle socket of the pool cannot fail it the same way.
      const fresh = pool.fresh?.() ?? new Client(new URL(url).origin, { pipelining: 0 });
      try {
        return await exchange(fresh, request, opts, url, deadline);
      } finally {
        void fresh.destroy().catch(() => undefined);
      }
    }
  } catch (caught) {
    if (opts.signal?.aborted) throw abortReason(opts.signal);
    if (caught instanceof DecodeError || caught instanceof UpstreamRefusedError) throw caught;
    const { cause, timedOut } = exchangeFailure(caught);
    if (timedOut)
      throw new UpstreamTransportError(url, 'timeout', `no complete response within ${opts.timeoutMs} ms`);
    throw new UpstreamTransportError(url, 'network', describe(cause));
  }
}

async function exchange(
  dispatcher: Dispatcher,
  request: Dispatcher.DispatchOptions,
  opts: SendOptions,
  url: string,
  deadline: number,
): Promise<RawResponse> {
  const maxBodyBytes = opts.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  let res: Received;
  try {
    res = await receive(dispatcher, request, {
      deadline,
      signal: opts.signal,
      keepBytes: (status) => (opts.readBody(status) ? Infinity : 0),
      maxBodyBytes,
    });
  } catch (err) {
    if (!(err instanceof BodyTooLargeError)) throw err;
    const what = err.declared === undefined ? 'body' : `Content-Length (${err.declared} bytes)`;
    throw new UpstreamRefusedError(
      url,
      'body_too_large',
      `${what} is larger than max_body_bytes (${maxBodyBytes} bytes)`,
    );
  }
  if (!opts.readBody(res.status)) return { status: res.status, headers: res.headers, body: '', bytes: 0 };
  const encoding = res.headers['content-encoding'];
  let bytes: Buffer = res.body;
  if (encoding !== undefined) {
    try {
      bytes = await decodeContentEncoding(res.body, encoding, maxBodyBytes);
    } catch (err) {
      if (err instanceof DecodedTooLargeError) {
        throw new UpstreamRefusedError(
          url,
          'body_too_large',
          `decoded ${err.coding} body is larger than max_body_bytes (${maxBodyBytes} bytes)`,
        );
      }
      if (err instanceof ContentEncodingError) throw new DecodeError(url, err.message);
      throw err;
    }
  }
  let decoded: DecodedText;
  try {
    decoded = decodeText(bytes, res.headers['content-type']);
  } catch (err) {
    if (err instanceof CharsetError) throw new DecodeError(url, err.message);
    throw err;
  }
  const out: RawResponse = {
    status: res.status,
    headers: res.headers,
    body: decoded.text,
    bytes: bytes.length,
  };
  if (decoded.invalidUtf8) out.invalidUtf8 = true;
  return out;
}

/** The peer closed or reset the connection before answering anything. */
function closedBeforeResponse(err: unknown): boolean {
  if (!(err instanceof NoResponseError)) return false;
  const e = err.original as { code?: unknown; cause?: { code?: unknown } } | undefined;
  const codes = [e?.code, e?.cause?.code];
  return codes.some((c) => c === 'UND_ERR_SOCKET' || c === 'ECONNRESET' || c === 'EPIPE');
}

function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const code = (err as { code?: unknown }).code;
  // Socket errors hide the useful part (ECONNRESET, ECONNREFUSED) in `cause`.
  const cause = err.cause instanceof Error ? err.cause : undefined;
  const causeCode = cause ? (cause as { code?: unknown }).code : undefined;
  const parts = [typeof code === 'string' ? code : undefined, err.message];
  if (cause && cause.message !== err.message) {
    parts.push(`(${typeof causeCode === 'string' ? `${causeCode}: ` : ''}${cause.message})`);
  }
  return parts.filter(Boolean).join(' ');
}
