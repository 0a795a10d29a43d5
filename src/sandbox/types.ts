// The sandbox's public option and record types, and the one place where options get their defaults
// and are checked (bad values name the offending option).
import { ConfigError } from '../core/errors.js';
import type { ServiceKind } from '../core/change.js';
import {
  DIGEST_ALGORITHMS,
  resolveDialect,
  type Dialect,
  type DialectSpec,
  type DigestAlgorithm,
} from './dialect.js';

export type { DigestAlgorithm } from './dialect.js';
export { DIGEST_ALGORITHMS } from './dialect.js';

export type ServiceName = ServiceKind;
export const SERVICE_NAMES: readonly ServiceName[] = ['scheduling', 'workflow'];

export type FaultKind =
  | 'status_500'
  | 'status_503'
  | 'status_429'
  | 'status_429_retry_after'
  | 'hang'
  | 'truncated'
  | 'malformed'
  | 'html_200';

export const FAULT_KINDS: readonly FaultKind[] = [
  'status_500',
  'status_503',
  'status_429',
  'status_429_retry_after',
  'hang',
  'truncated',
  'malformed',
  'html_200',
];

/** Which requests faults may hit: every authenticated request, feed pages only, or subject GETs only. */
export type FaultPaths = 'all' | 'feed' | 'subject';

export interface FaultConfig {
  rate: number;
  kinds?: FaultKind[];
  paths?: FaultPaths;
}

export interface SandboxOptions {
  /** Default 0 = any free port; the host is always 127.0.0.1. */
  port?: number;
  /** Default 1; everything generated is deterministic for a seed. */
  seed?: number;
  /** Events generated up front on EACH service (default 200). */
  backlog?: number;
  /** Live events per second per service (default 0 = none). */
  rate?: number;
  /** 0..1, default 0. */
  faultRate?: number;
  /** Default: all kinds. */
  faultKinds?: FaultKind[];
  /** Default 'all'. */
  faultPaths?: FaultPaths;
  username?: string;
  password?: string;
  /** Digest nonce lifetime; overrides the dialect's (default 60000). */
  nonceTtlMs?: number;
  /** Workflow feed: max places an event is listed away from its id order (default 3, 0 = none). */
  workflowDisorder?: number;
  /** Artificial latency added to every request under the service bases (default 0). */
  latencyMs?: number;
  /** The one Digest algorithm a service offers, overriding the dialect's list for that service. */
  digestAlgorithms?: Partial<Record<ServiceName, DigestAlgorithm>>;
  /** The forms the services answer in: a profile name, or a profile plus switches (default `default`). */
  dialect?: DialectSpec;
}

export type ResolvedOptions = Required<
  Omit<SandboxOptions, 'digestAlgorithms' | 'faultKinds' | 'dialect' | 'nonceTtlMs'>
> & {
  faultKinds: FaultKind[];
  digestAlgorithms: Partial<Record<ServiceName, DigestAlgorithm>>;
  dialect: Dialect;
};

/** One event as the sandbox produced it (what the feed lists, in structured form). */
export interface SandboxEvent {
  id: number;
  service: ServiceName;
  event_type: string;
  resource_type: string;
  /** `archived` only with the dialect's `unknownEventTypes` (a type the specs do not list). */
  operation: 'created' | 'updated' | 'deleted' | 'metadata_updated' | 'archived';
  /** As sent on the wire: `Z` or a numeric offset. */
  timestamp: string;
  /** The same instant, ISO 8601 UTC with milliseconds and `Z`. */
  occurred_at: string;
  /** Names as listed in the event's `changes` (trimmed); [] when the event has none. */
  changes: string[];
  event_url: string;
  subject_url: string;
  /** The rule a scheduling_created event points to; null otherwise. */
  source_url: string | null;
}

export type RequestKind = 'feed' | 'subject' | 'root' | 'event' | 'other';
export const REQUEST_KINDS: readonly RequestKind[] = ['feed', 'subject', 'root', 'event', 'other'];

export interface ServiceStats {
  /** Authenticated requests by kind (faulted ones included). */
  requests: Record<RequestKind, number>;
  /** Every response status sent under this service's base, 401s included. */
  statuses: Record<string, number>;
  /** 401 answers (missing, wrong, stale or replayed credentials). */
  unauthorized: number;
  /** Faults injected, by kind. */
  faults: Record<FaultKind, number>;
  /** 404s served for subject URLs (deleted or unknown subjects). */
  subject_not_found: number;
}

export type SandboxStats = Record<ServiceName, ServiceStats>;

const DEFAULTS = {
  port: 0,
  seed: 1,
  backlog: 200,
  rate: 0,
  faultRate: 0,
  faultPaths: 'all' as FaultPaths,
  username: 'sandbox',
  password: 'sandbox-secret',
  workflowDisorder: 3,
  latencyMs: 0,
};

export function resolveOptions(opts: SandboxOptions = {}): ResolvedOptions {
  const o = { ...DEFAULTS, ...dropUndefined(opts) };
  checkInteger('port', o.port, 0, 65535);
  checkInteger('seed', o.seed, -(2 ** 31), 2 ** 32 - 1);
  checkInteger('backlog', o.backlog, 0, 10_000_000);
  checkNumber('rate', o.rate, 0, 100_000);
  checkNumber('faultRate', o.faultRate, 0, 1);
  if (opts.nonceTtlMs !== undefined) checkInteger('nonceTtlMs', opts.nonceTtlMs, 1, 2 ** 31 - 1);
  const dialect = withNonceTtl(resolveDialect(opts.dialect ?? 'default'), opts.nonceTtlMs);
  checkInteger('workflowDisorder', o.workflowDisorder, 0, 1000);
  checkInteger('latencyMs', o.latencyMs, 0, 600_000);
  if (typeof o.username !== 'string' || o.username === '' || o.username.includes(':')) {
    throw new ConfigError('username', 'must be a non-empty string without ":"');
  }
  if (typeof o.password !== 'string') throw new ConfigError('password', 'must be a string');
  const faultKinds = checkFaultKinds('faultKinds', opts.faultKinds ?? [...FAULT_KINDS]);
  const faultPaths = checkFaultPaths('faultPaths', o.faultPaths);
  const algos: Partial<Record<ServiceName, DigestAlgorithm>> = {};
  for (const [service, algo] of Object.entries(opts.digestAlgorithms ?? {})) {
    if (!SERVICE_NAMES.includes(service as ServiceName)) {
      throw new ConfigError(`digestAlgorithms.${service}`, 'unknown service (scheduling | workflow)');
    }
    if (algo === undefined) continue;
    if (!DIGEST_ALGORITHMS.includes(algo)) {
      throw new ConfigError(`digestAlgorithms.${service}`, `must be one of ${DIGEST_ALGORITHMS.join(', ')}`);
    }
    algos[service as ServiceName] = algo;
  }
  const {
    nonceTtlMs: _ttl,
    dialect: _dialect,
    ...rest
  } = o as typeof o & Pick<SandboxOptions, 'nonceTtlMs' | 'dialect'>;
  return { ...rest, faultKinds, faultPaths, digestAlgorithms: algos, dialect };
}

/** The `nonceTtlMs` option, older than dialects, still sets the nonce lifetime when given. */
export function withNonceTtl(d: Dialect, nonceTtlMs: number | undefined): Dialect {
  return nonceTtlMs === undefined ? d : { ...d, nonceTtlMs };
}

/** Validates a fault configuration from the JS API or the control API; returns it with defaults. */
export function checkFaultConfig(cfg: unknown, all: FaultKind[]): Required<FaultConfig> {
  if (typeof cfg !== 'object' || cfg === null || Array.isArray(cfg)) {
    throw new ConfigError('faults', 'must be an object like {"rate": 0.1, "kinds": [...], "paths": "all"}');
  }
  const { rate, kinds, paths, ...rest } = cfg as Record<string, unknown>;
  const unknown = Object.keys(rest);
  if (unknown.length > 0) throw new ConfigError(`faults.${unknown[0]}`, 'unknown key');
  checkNumber('faults.rate', rate, 0, 1);
  return {
    rate: rate as number,
    kinds: checkFaultKinds('faults.kinds', kinds ?? all),
    paths: checkFaultPaths('faults.paths', paths ?? 'all'),
  };
}

function checkFaultKinds(path: string, kinds: unknown): FaultKind[] {
  if (!Array.isArray(kinds) || kinds.length === 0) {
    throw new ConfigError(path, `must be a non-empty list of ${FAULT_KINDS.join(', ')}`);
  }
  kinds.forEach((k, i) => {
    if (!FAULT_KINDS.includes(k as FaultKind)) {
      throw new ConfigError(`${path}[${i}]`, `unknown fault kind ${JSON.stringify(k)}`);
    }
  });
  return [...new Set(kinds as FaultKind[])];
}

function checkFaultPaths(path: string, value: unknown): FaultPaths {
  if (value !== 'all' && value !== 'feed' && value !== 'subject') {
    throw new ConfigError(path, `must be "all", "feed" or "subject", got ${JSON.stringify(value)}`);
  }
  return value;
}

function checkNumber(path: string, value: unknown, min: number, max: number): void {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < min || value > max) {
    throw new ConfigError(path, `must be a number from ${min} to ${max}, got ${JSON.stringify(value)}`);
  }
}

function checkInteger(path: string, value: unknown, min: number, max: number): void {
  checkNumber(path, value, min, max);
  if (!Number.isInteger(value)) throw new ConfigError(path, `must be an integer, got ${String(value)}`);
}

function dropUndefined<T extends object>(obj: T): Partial<T> {
  return Object.fromEntries(Object.entries(obj).filter(([, v]) => v !== undefined)) as Partial<T>;
}

export function emptyServiceStats(): ServiceStats {
  return {
    requests: Object.fromEntries(REQUEST_KINDS.map((k) => [k, 0])) as Record<RequestKind, number>,
    statuses: {},
    unauthorized: 0,
    faults: Object.fromEntries(FAULT_KINDS.map((k) => [k, 0])) as Record<FaultKind, number>,
    subject_not_found: 0,
  };
}
