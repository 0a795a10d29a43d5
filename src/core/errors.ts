// The few typed errors that decide "retry" versus "give up". Every message names the culprit
// (a URL, a config key path, a sink) and never carries a credential. URLs and details in upstream
// errors may come from upstream (a link, an element name, a header): each is cut (bounded-text.ts)
// before it goes into a message.
import { cut } from './bounded-text.js';

/** Base class so callers can tell our own, already-explained failures from bugs. */
export class FeedsyncError extends Error {
  override name = 'FeedsyncError';
  /** Whether repeating the same operation later can succeed. */
  readonly retryable: boolean;
  constructor(message: string, retryable: boolean, options?: { cause?: unknown }) {
    super(message, options);
    this.retryable = retryable;
  }
}

/** The configuration is invalid; `path` is the offending key path (e.g. `sources[0].base_url`). */
export class ConfigError extends FeedsyncError {
  override name = 'ConfigError';
  constructor(
    readonly path: string,
    message: string,
  ) {
    super(path ? `${path}: ${message}` : message, false);
  }
}

/** Connection refused/reset, DNS, socket hang-up, or no response within `timeout_ms`. */
export class UpstreamTransportError extends FeedsyncError {
  override name = 'UpstreamTransportError';
  constructor(
    readonly url: string,
    readonly code: 'timeout' | 'network',
    detail: string,
    options?: { cause?: unknown },
  ) {
    super(
      `${code === 'timeout' ? 'timed out' : 'network error'} on GET ${cut(url)}: ${cut(detail)}`,
      true,
      options,
    );
  }
}

/** A non-2xx answer other than 404 (404 is a value, not an error); see isRetryableStatus. */
export class UpstreamHttpError extends FeedsyncError {
  override name = 'UpstreamHttpError';
  constructor(
    readonly url: string,
    readonly status: number,
    detail: string,
    /** From Retry-After, when the server sent one. */
    readonly retryAfterMs?: number,
  ) {
    super(`HTTP ${status} on GET ${cut(url)}${detail ? `: ${cut(detail)}` : ''}`, isRetryableStatus(status));
  }
}

/**
 * 401 after a fresh digest challenge: the credentials are wrong, or the challenge cannot or may not
 * be answered. Retried slowly by the poller only.
 */
export class UpstreamAuthError extends FeedsyncError {
  override name = 'UpstreamAuthError';
  constructor(
    readonly url: string,
    detail: string,
    /** false when the server, not the credentials, is at fault (a stale-nonce loop). */
    credentials = true,
    /** Set when feedsync refused the challenge itself (counted as a refusal). */
    readonly refusal?: RefusalReason,
  ) {
    super(
      `authentication failed on GET ${cut(url)}: ${cut(detail)}${credentials ? " (check the source's username and password)" : ''}`,
      false,
    );
  }
}

/** The body could not be turned into a resource: malformed/truncated XML or JSON, HTML, wrong type. */
export class DecodeError extends FeedsyncError {
  override name = 'DecodeError';
  constructor(
    readonly url: string,
    readonly reason: string,
  ) {
    // A bad body is usually a transient upstream problem (truncation, proxy error page): retry.
    super(`cannot decode response of GET ${cut(url)}: ${cut(reason)}`, true);
  }
}

/** Why feedsync refused an upstream answer or link (the `reason` label of feedsync_upstream_refusals_total). */
export const REFUSAL_REASONS = [
  'body_too_large',
  'too_deep',
  'too_many_values',
  'doctype',
  'foreign_origin',
  'insecure_link',
  'unusable_link',
  'weak_digest',
  'invalid_event',
] as const;
export type RefusalReason = (typeof REFUSAL_REASONS)[number];

/**
 * feedsync refused what upstream sent or pointed to: a body over the source's limits, a link to
 * another origin or an unusable one, a feed event it cannot take as it is (`invalid_event`: an id
 * beyond 2^53−1, negative or not an integer, a timestamp outside the accepted range). Asking again at once would get the same answer: not retried by
 * the client; the poller fails the page (cursor unmoved) and retries it with its own backoff.
 */
export class UpstreamRefusedError extends FeedsyncError {
  override name = 'UpstreamRefusedError';
  constructor(
    readonly url: string,
    readonly reason: RefusalReason,
    detail: string,
  ) {
    super(`refused GET ${cut(url)}: ${cut(detail)}`, false);
  }
}

/**
 * Why a subject can never be decoded (docs/upstream-security.md "Undecodable subjects"): the
 * upstream refusals no retry can fix, and a change over `max_change_bytes`.
 */
export const UNDECODABLE_REASONS = [
  'too_deep',
  'too_many_values',
  'body_too_large',
  'max_change_bytes',
] as const;
export type UndecodableReason = (typeof UNDECODABLE_REASONS)[number];

/**
 * The source stops on this event (`on_undecodable_subject: stop`): its subject can never be
 * decoded, so the page is retried slowly, like wrong credentials, until the operator moves on.
 * The message names the source, the event and its type, says what was refused (`what`, which
 * names the subject URL) and the two ways on.
 */
export class UndecodableSubjectError extends FeedsyncError {
  override name = 'UndecodableSubjectError';
  constructor(
    readonly source: string,
    readonly eventId: number,
    eventType: string,
    readonly reason: UndecodableReason,
    what: string,
  ) {
    super(
      `source ${source} stopped at event ${eventId} (${cut(eventType, 100)}), whose subject can ` +
        `never be decoded (${reason}): ${what}. Nothing after it is delivered until either ` +
        `sources[].on_undecodable_subject is set to deliver_unreadable (the change is delivered with ` +
        `subject_state "unreadable") or the cursor is moved past it (feedsync cursor set ${source} ${eventId})`,
      false,
    );
  }
}

/** Thrown by a sink: the delivery may succeed later (network, 5xx, 429). */
export class RetryLaterError extends FeedsyncError {
  override name = 'RetryLaterError';
  constructor(
    message: string,
    /** Minimum wait the receiver asked for (Retry-After), if any. */
    readonly retryAfterMs?: number,
    options?: { cause?: unknown },
  ) {
    super(message, true, options);
  }
}

/**
 * Not thrown by a sink but instead of calling it: the sink keeps failing and only one probe at a
 * time reaches it (sinks/probe-gate.ts). A wait, so the queues spend no attempt on the change.
 */
export class SinkProbingError extends RetryLaterError {
  override name = 'SinkProbingError';
  constructor(sink: string, retryAfterMs: number, lastError: string) {
    super(
      `sink "${sink}" is failing (${lastError}); held back until its next probe, in ${retryAfterMs} ms`,
      retryAfterMs,
    );
  }
}

/** Thrown by a sink: this change can never be delivered (e.g. HTTP 400); dead-letter it at once. */
export class NeverError extends FeedsyncError {
  override name = 'NeverError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, false, options);
  }
}

/**
 * HTTP statuses worth repeating, for upstream reads and webhook deliveries alike: server errors,
 * 429 Too Many Requests and 408 Request Timeout. Anything else will answer the same next time.
 */
export function isRetryableStatus(status: number): boolean {
  return status >= 500 || status === 429 || status === 408;
}

const TIMEOUT_CODES = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'UND_ERR_CONNECT_TIMEOUT']);

/** An HTTP request that ran out of time: undici's own timeouts, or a signal aborted with a TimeoutError. */
export function isTimeoutError(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  const { code, name } = err as { code?: unknown; name?: unknown };
  return (typeof code === 'string' && TIMEOUT_CODES.has(code)) || name === 'TimeoutError';
}

/** Message of anything thrown, for logs; never includes stack traces of non-errors. */
export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}
