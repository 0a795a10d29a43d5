// Redis failures sorted by what the operator must do about them. ioredis reports a refused
// password, a missing ACL permission, a replica or a cluster node as a reply text, and a TLS or
// network failure as a Node error code; without sorting them, every one of them reads as
// "redis connection error" and gets retried forever.
import type { RedisErrorKind } from '../../core/events.js';
import { errorMessage } from '../../core/errors.js';

export { REDIS_ERROR_KINDS, type RedisErrorKind } from '../../core/events.js';

// Reply prefixes are upper case and may be quoted inside our own messages ("cannot renew …: NOPERM").
const WRONGPASS =
  /\b(WRONGPASS|NOAUTH)\b|invalid (username-password pair|password)|called without any password configured/;
// Redis 7 answers a script that calls a denied command with "ERR The user executing the script
// can't run this command", not NOPERM.
const NOPERM = /\bNOPERM\b|can't run this command or subcommand|no permissions to (run|access)/i;
const MOVED = /\b(MOVED|ASK) \d+ |\bCLUSTERDOWN\b/;
const READONLY = /\bREADONLY\b/;
const TLS_CODE = /^(ERR_TLS_|ERR_SSL_|ERR_OSSL_|CERT_|UNABLE_TO_|SELF_SIGNED_|DEPTH_ZERO_|HOSTNAME_MISMATCH)/;
const TLS_TEXT =
  /alert certificate required|alert handshake failure|alert bad certificate|wrong version number|packet length too long/i;
const DECODE_ALERT = /ALERT_DECODE_ERROR|alert decode error/i;
const UNREACHABLE_CODE = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);
const UNREACHABLE_TEXT =
  /Connection is closed|Stream isn't writeable|Command timed out|max retries per request|no answer from redis|ECONNREFUSED|ETIMEDOUT|ECONNRESET/i;

function codeOf(err: unknown): string {
  const code = (err as { code?: unknown } | null | undefined)?.code;
  return typeof code === 'string' ? code : '';
}

export function classifyRedisError(err: unknown): RedisErrorKind {
  // A transaction refused at EXEC (EXECABORT) failed because of a queued command's error.
  const previous = (err as { previousErrors?: unknown } | null | undefined)?.previousErrors;
  if (Array.isArray(previous) && previous.length > 0) {
    const first = classifyRedisError(previous[0]);
    if (first !== 'other') return first;
  }
  // A cluster client that cannot read a slot map says so, with the node's own error attached.
  const lastNode = (err as { lastNodeError?: unknown } | null | undefined)?.lastNodeError;
  if (lastNode) {
    const kind = classifyRedisError(lastNode);
    if (kind !== 'other') return kind;
  }
  const message = errorMessage(err);
  const code = codeOf(err);
  if (/Failed to refresh slots cache/i.test(message)) return 'unreachable';
  if (WRONGPASS.test(message)) return 'wrongpass';
  if (NOPERM.test(message)) return 'noperm';
  if (MOVED.test(message)) return 'moved';
  if (READONLY.test(message)) return 'readonly';
  // A decode_error alert answers garbled bytes (a connection cut mid-handshake by a failover), never
  // a certificate or setting: a transport fault, retried like any other.
  if (DECODE_ALERT.test(`${code} ${message}`)) return 'unreachable';
  if (TLS_CODE.test(code) || TLS_TEXT.test(message)) return 'tls';
  if (UNREACHABLE_CODE.has(code) || UNREACHABLE_TEXT.test(message)) return 'unreachable';
  return 'other';
}

/** The failure kinds only a change of configuration, ACL or topology can fix (retrying cannot). */
export function needsOperator(kind: RedisErrorKind): boolean {
  return (
    kind === 'wrongpass' || kind === 'noperm' || kind === 'moved' || kind === 'readonly' || kind === 'tls'
  );
}

const HINTS: Record<Exclude<RedisErrorKind, 'tls' | 'other'>, string> = {
  wrongpass: 'Redis rejected the credentials: check the user and password in queue.redis_url',
  noperm: 'the Redis user lacks a permission: see docs/scaled-mode.md#redis-acl',
  moved:
    'a Redis Cluster node behind a single-server URL (name the cluster with redis+cluster://host:port,… in queue.redis_url), or a slot moving or failing over (retried)',
  readonly: 'connected to a replica: point queue.redis_url at the primary',
  unreachable: 'cannot reach Redis; retrying until it answers',
};

/** What the failure means and what to do about it, in one phrase (never the URL or a secret). */
export function redisErrorHint(err: unknown, kind: RedisErrorKind = classifyRedisError(err)): string {
  if (kind === 'tls') return tlsHint(err);
  // Only a cluster answers CLUSTERDOWN: a URL of the wrong form is not the cause there.
  if (kind === 'moved' && /\bCLUSTERDOWN\b/.test(errorMessage(err)))
    return 'the Redis Cluster is down or failing over (CLUSTERDOWN); retried';
  if (kind === 'other') return 'redis error';
  return HINTS[kind];
}

function tlsHint(err: unknown): string {
  const code = codeOf(err);
  const message = errorMessage(err);
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID' || code === 'HOSTNAME_MISMATCH')
    return "TLS: the server's certificate does not name the host of queue.redis_url: connect by a name it lists, or set queue.redis_tls.servername";
  if (code === 'CERT_HAS_EXPIRED' || code === 'CERT_NOT_YET_VALID')
    return "TLS: the server's certificate is expired or not yet valid";
  if (/^(UNABLE_TO_|SELF_SIGNED_|DEPTH_ZERO_|CERT_)/.test(code))
    return "TLS: the server's certificate is not trusted: set queue.redis_tls.ca_file to the CA that signed it";
  if (/wrong version number|packet length too long/i.test(message))
    return 'TLS: the port does not speak TLS (a plain Redis port?): use its TLS port, or redis://';
  if (/ALERT|alert/.test(`${code} ${message}`))
    return 'TLS: the server refused the handshake: if it requires a client certificate, set queue.redis_tls.cert_file and key_file (signed by a CA it trusts)';
  return 'TLS failed';
}
