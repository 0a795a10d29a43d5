// The effective configuration, after ${ENV} substitution, *_file resolution and defaults.
// The zod schema in schema.ts produces exactly this shape (checked at compile time there).
import type { ServiceKind } from '../core/change.js';
import type { SinkConfig } from '../sinks/registry.js';

export interface SourceConfig {
  name: string;
  service: ServiceKind;
  /** Without trailing slash; the feed is `${base_url}/api/events`. */
  base_url: string;
  username: string;
  password: string;
  format: 'json' | 'xml';
  event_types: string[];
  expand_subject: boolean;
  expand_source: boolean;
  /** 'latest' | 'earliest' | a decimal event id. */
  start_from: 'latest' | 'earliest' | number;
  poll_interval_ms: number;
  timeout_ms: number;
  subject_concurrency: number;
  /** Send Accept-Encoding and decode gzip/deflate/br answers. */
  compression: boolean;
  /** Largest response body accepted, on the wire and once decoded (bytes). */
  max_body_bytes: number;
  /**
   * Bytes of subject bodies a source may have in flight and held until their page commits (the page
   * read ahead included); each subject fetch reserves max_body_bytes of it.
   */
  max_page_bytes: number;
  /** Largest change (its JSON, subject included, in UTF-8 bytes). */
  max_change_bytes: number;
  /** A subject that can never be decoded: stop the source on it, or deliver it as `unreadable`. */
  on_undecodable_subject: 'stop' | 'deliver_unreadable';
  /** Origins besides base_url's that links may point to (credentials go there too). */
  allowed_origins: string[];
  /** Accept a plain http:// base_url or allowed origin off loopback (credentials in clear). */
  allow_insecure_http: boolean;
  /** The weakest Digest algorithm answered: md5 (also MD5-sess) or sha-256 (SHA-256, SHA-256-sess). */
  digest_min: 'md5' | 'sha-256';
  /** Refuse the RFC 2069 form (a challenge without qop). */
  require_qop: boolean;
  /** Forward proxy URL for this source; absent: HTTPS_PROXY / HTTP_PROXY / NO_PROXY. */
  proxy?: string;
  /** PEM files (absolute paths once loaded): CA bundle to trust, client certificate and key. */
  ca_file?: string;
  cert_file?: string;
  key_file?: string;
}

export interface SinkFilter {
  sources: string[];
  services: string[];
  event_types: string[];
  resource_types: string[];
}

// Each sink type's entry is declared by its own module's schema (type-only imports: no sink code
// loads); sinks/registry.ts lists them.
export type { SinkConfig };
export type { JsonlSinkConfig } from '../sinks/jsonl.js';
export type { ModuleSinkConfig } from '../sinks/module.js';
export type { PostgresSinkConfig } from '../sinks/postgres.js';
export type { SqliteSinkConfig } from '../sinks/sqlite-mirror.js';
export type { WebhookSinkConfig } from '../sinks/webhook.js';

/** bullmq over `rediss://`: whom to trust and which client certificate to present. */
export interface RedisTlsConfig {
  /** PEM CA bundle (absolute path once loaded); replaces the system trust store for Redis. */
  ca_file?: string;
  /** Client certificate and its key (PEM), for a server with `tls-auth-clients yes`. */
  cert_file?: string;
  key_file?: string;
  /** Host name to verify the certificate against (and to send as SNI) instead of the URL's host. */
  servername?: string;
  /** false: encrypt without verifying the server's certificate (never in production). */
  reject_unauthorized: boolean;
}

export interface QueueConfig {
  driver: 'local' | 'bullmq';
  redis_url?: string;
  /** bullmq behind Sentinel: the sentinels' own password (`requirepass` on the sentinels). */
  redis_sentinel_password?: string;
  /** bullmq: TLS settings for a `rediss://` redis_url; absent, rediss:// trusts the system CAs. */
  redis_tls?: RedisTlsConfig;
  prefix: string;
  attempts: number;
  backoff_ms: number;
  max_backoff_ms: number;
  concurrency: number;
  /**
   * A sink with this many undelivered changes is parked (sinks[].max_backlog overrides it); default
   * 1,000,000 with the local queue, 100,000 with bullmq.
   */
  max_backlog: number;
  /** bullmq: completed jobs kept this long so a re-add after a crash is a no-op. */
  retain_completed_ms: number;
  /** bullmq: and at most this many per queue. */
  retain_completed_count: number;
  /** bullmq: per-subject order shards per sink (global concurrency 1 each). */
  shards: number;
  /** How long a lease lasts unrenewed (bullmq: a poller's on a source; local: a `run`'s on the store); a standby takes over after it. */
  lease_ttl_ms: number;
  /** bullmq: let `poll` start on a Redis that neither snapshots nor appends (cursors live there). */
  allow_volatile_redis: boolean;
  /**
   * bullmq: every page commit (and catch-up commit, and the fenced cursor save of `cursor set/reset`)
   * must be acknowledged by this many replicas (Redis WAIT) or it counts as failed and is retried;
   * 0: off. With 1 or more, `poll` also accepts a primary with that many replicas instead of AOF.
   */
  min_replicas_acked: number;
  /** A sink call that has not settled by then counts as failed (retried later). */
  delivery_timeout_ms: number;
}

export interface FeedsyncConfig {
  shutdown_timeout_ms: number;
  store: { path: string };
  queue: QueueConfig;
  sources: SourceConfig[];
  sinks: SinkConfig[];
  http: { host: string; port: number };
  log: { level: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent' };
  /** The admin API and console (docs/admin.md); off by default. */
  admin: AdminConfig;
}

export interface AdminConfig {
  enabled: boolean;
  host: string;
  port: number;
  /** File holding the bearer token that may read and change (required when enabled). */
  token_file?: string;
  /** File holding the bearer token that may only read. */
  read_token_file?: string;
}

/** A loaded config plus where it came from. */
export interface LoadedConfig {
  config: FeedsyncConfig;
  /** Absolute path of the file, or undefined for embedded defaults. */
  file?: string;
  /** Directory relative paths resolve against. */
  dir: string;
}
