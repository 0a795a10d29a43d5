// The configuration schema (docs/reference/configuration.md): strict objects, and the ONE place defaults live.
// It validates an already env-substituted, *_file-resolved document; paths that depend on the
// config file's location (module sinks) are resolved by load.ts after parsing.
import { z } from 'zod';
import { ConfigError } from '../core/errors.js';
import { sinkConfigSchema } from '../sinks/registry.js';
import { atLeastOne, durationMs, isHttpUrl, name, nonEmpty, parseUrl, SERVICE_KINDS } from './fields.js';
import type { FeedsyncConfig } from './types.js';
import { MULTI_HOST_FORMS, multiHostKind, parseMultiHostUrl } from '../queue/bullmq/redis-multi-host.js';

export { SINK_TYPES } from '../sinks/registry.js';
export { SERVICE_KINDS } from './fields.js';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

// One check, one message: chained refines would all run and pile up on a non-URL.
const baseUrl = z
  .string()
  .superRefine((value, ctx) => {
    const url = parseUrl(value);
    let problem: string | undefined;
    if (url === undefined || !isHttpUrl(value)) problem = 'must be an http(s) URL';
    else if (url.search !== '' || url.hash !== '' || /[?#]/.test(value)) {
      problem = 'must not have a query or fragment (the feed is {base_url}/api/events)';
    } else if (url.username !== '' || url.password !== '') {
      problem = 'must not contain credentials (use username and password)';
    }
    if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
  })
  .transform((value) => value.replace(/\/+$/, ''));

/** scheme://host[:port] of an http(s) URL, normalized (a path, query or credentials are refused). */
const origin = z
  .string()
  .superRefine((value, ctx) => {
    const url = parseUrl(value);
    if (url === undefined || !isHttpUrl(value) || url.username !== '' || url.password !== '') {
      ctx.addIssue({ code: 'custom', message: 'must be an http(s) origin such as https://cdn.example.com' });
    } else if (!['', '/'].includes(url.pathname) || url.search !== '' || url.hash !== '') {
      ctx.addIssue({ code: 'custom', message: 'must be an origin only (scheme, host and port), no path' });
    }
  })
  .transform((value) => new URL(value).origin);

const proxyUrl = z.string().refine((value) => isHttpUrl(value), {
  // Never echo the value: it may carry the proxy's credentials.
  error: 'must be an http:// or https:// URL',
});

const redisUrl = z.string().refine(
  (value) => {
    if (multiHostKind(value)) {
      try {
        parseMultiHostUrl(value);
        return true;
      } catch {
        return false;
      }
    }
    const protocol = parseUrl(value)?.protocol;
    return protocol === 'redis:' || protocol === 'rediss:';
  },
  // Never echo the value: it usually carries the Redis password.
  {
    error: `must be a redis:// or rediss:// URL, or ${MULTI_HOST_FORMS}`,
  },
);

/** latest | earliest | a non-negative integer event id, as a number or a digit string. */
const startFrom = z.unknown().transform((value, ctx): 'latest' | 'earliest' | number => {
  if (value === 'latest' || value === 'earliest') return value;
  const id = typeof value === 'string' && /^[0-9]+$/.test(value) ? Number(value) : value;
  if (typeof id === 'number' && Number.isSafeInteger(id) && id >= 0) return id;
  ctx.addIssue({
    code: 'custom',
    message: `must be latest, earliest or a non-negative integer event id (got ${JSON.stringify(value)})`,
  });
  return z.NEVER;
});

const sourceSchema = z.strictObject({
  name,
  service: z.enum(SERVICE_KINDS),
  base_url: baseUrl,
  username: nonEmpty,
  password: nonEmpty,
  format: z.enum(['json', 'xml']).default('json'),
  event_types: z.array(nonEmpty).default([]),
  expand_subject: z.boolean().default(true),
  // Accepted on workflow sources too (one config shape for both); that service has no expand.
  expand_source: z.boolean().default(true),
  start_from: startFrom.default('latest'),
  poll_interval_ms: durationMs.default(5000),
  timeout_ms: durationMs.default(30000),
  subject_concurrency: atLeastOne.default(8),
  compression: z.boolean().default(true),
  // A feed page holds at most 50 events; 8 MiB is ~100× a page of expanded subjects.
  max_body_bytes: z
    .number()
    .int()
    .min(65536)
    .default(8 * 1024 * 1024),
  // Memory per page (docs/upstream-security.md "Memory per page"): subject bodies in flight and
  // held until the page commits, read-ahead included, and the size of one change.
  max_page_bytes: z
    .number()
    .int()
    .min(65536)
    .default(16 * 1024 * 1024),
  max_change_bytes: z
    .number()
    .int()
    .min(65536)
    .default(8 * 1024 * 1024),
  on_undecodable_subject: z.enum(['stop', 'deliver_unreadable']).default('stop'),
  allowed_origins: z.array(origin).default([]),
  // Digest over plain http off loopback: refused unless this says the network is trusted.
  allow_insecure_http: z.boolean().default(false),
  // Every form UPSTREAM-DIALECTS D1/D3 lists is answered by default; these raise the floor.
  digest_min: z.enum(['md5', 'sha-256']).default('md5'),
  require_qop: z.boolean().default(false),
  proxy: proxyUrl.optional(),
  ca_file: nonEmpty.optional(),
  cert_file: nonEmpty.optional(),
  key_file: nonEmpty.optional(),
});

const redisTlsSchema = z.strictObject({
  ca_file: nonEmpty.optional(),
  cert_file: nonEmpty.optional(),
  key_file: nonEmpty.optional(),
  servername: nonEmpty.optional(),
  reject_unauthorized: z.boolean().default(true),
});

const queueSchema = z
  .strictObject({
    driver: z.enum(['local', 'bullmq']).default('local'),
    redis_url: redisUrl.optional(),
    redis_sentinel_password: z.string().min(1).optional(),
    redis_tls: redisTlsSchema.optional(),
    prefix: nonEmpty.default('feedsync'),
    attempts: atLeastOne.default(10),
    backoff_ms: durationMs.default(1000),
    max_backoff_ms: durationMs.default(300000),
    concurrency: atLeastOne.default(4),
    max_backlog: atLeastOne.optional(),
    retain_completed_ms: durationMs.default(86400000),
    retain_completed_count: z.number().int().nonnegative().default(10000),
    shards: atLeastOne.default(8),
    lease_ttl_ms: durationMs.default(15000),
    allow_volatile_redis: z.boolean().default(false),
    min_replicas_acked: z.number().int().nonnegative().default(0),
    delivery_timeout_ms: durationMs.default(60000),
  })
  .superRefine((queue, ctx) => {
    if (queue.driver === 'bullmq' && queue.redis_url === undefined) {
      ctx.addIssue({ code: 'custom', path: ['redis_url'], message: 'required when queue.driver is bullmq' });
    }
    if (
      queue.redis_sentinel_password !== undefined &&
      queue.redis_url !== undefined &&
      multiHostKind(queue.redis_url) !== 'sentinel'
    ) {
      ctx.addIssue({
        code: 'custom',
        path: ['redis_sentinel_password'],
        message: 'only with a redis+sentinel:// queue.redis_url',
      });
    }
    const tls = queue.redis_tls;
    // Silently speaking plain TCP with TLS settings present would send the password in clear.
    if (
      tls &&
      queue.redis_url !== undefined &&
      !/^rediss(\+(sentinel|cluster))?:\/\//i.test(queue.redis_url)
    ) {
      ctx.addIssue({
        code: 'custom',
        path: ['redis_tls'],
        message:
          'needs a rediss://, rediss+sentinel:// or rediss+cluster:// queue.redis_url (redis… is plain TCP)',
      });
    }
    if (tls && (tls.cert_file === undefined) !== (tls.key_file === undefined)) {
      ctx.addIssue({
        code: 'custom',
        path: ['redis_tls', tls.cert_file === undefined ? 'cert_file' : 'key_file'],
        message: 'cert_file and key_file go together (a client certificate needs its key)',
      });
    }
    if (queue.lease_ttl_ms < 1000) {
      ctx.addIssue({ code: 'custom', path: ['lease_ttl_ms'], message: 'must be at least 1000 (1 s)' });
    }
    if (queue.max_backoff_ms < queue.backoff_ms) {
      ctx.addIssue({
        code: 'custom',
        path: ['max_backoff_ms'],
        message: `must be >= queue.backoff_ms (${queue.backoff_ms})`,
      });
    }
  })
  // Each sink's bound before it is parked: a parked sink is re-read from the feed later, so the
  // bound only needs to cover ordinary outages. Local disk is cheap (1M changes ≈ 1–2 GB of store);
  // Redis memory is not (100k changes ≈ 100–200 MB).
  .transform((queue) => ({
    ...queue,
    max_backlog: queue.max_backlog ?? (queue.driver === 'local' ? 1_000_000 : 100_000),
  }))
  .prefault({});

export const configSchema = z
  .strictObject({
    shutdown_timeout_ms: durationMs.default(10000),
    store: z.strictObject({ path: nonEmpty.default('./data/feedsync.db') }).prefault({}),
    queue: queueSchema,
    sources: z.array(sourceSchema).min(1, { error: 'at least one source is required' }),
    sinks: z.array(sinkConfigSchema).min(1, { error: 'at least one sink is required' }),
    http: z
      .strictObject({
        host: nonEmpty.default('0.0.0.0'),
        port: z.number().int().min(0).max(65535).default(9464),
      })
      .prefault({}),
    log: z.strictObject({ level: z.enum(LOG_LEVELS).default('info') }).prefault({}),
    admin: z
      .strictObject({
        enabled: z.boolean().default(false),
        host: nonEmpty.default('127.0.0.1'),
        port: z.number().int().min(0).max(65535).default(9465),
        // Paths, read when the listener starts (relative to the config file): the tokens never
        // sit in the config object, so nothing that prints the config can show them.
        token_file: nonEmpty.optional(),
        read_token_file: nonEmpty.optional(),
      })
      .prefault({}),
  })
  .superRefine((config, ctx) => {
    if (config.admin.enabled && config.admin.token_file === undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['admin', 'token_file'],
        message:
          'required when admin.enabled is true (a file holding the bearer token that may change things)',
      });
    config.sources.forEach((source, i) => {
      if ((source.cert_file === undefined) !== (source.key_file === undefined)) {
        ctx.addIssue({
          code: 'custom',
          path: ['sources', i, source.cert_file === undefined ? 'cert_file' : 'key_file'],
          message: 'cert_file and key_file go together (a client certificate needs its key)',
        });
      }
      if (!source.allow_insecure_http) {
        const refuse = (url: string, path: (string | number)[]) =>
          ctx.addIssue({
            code: 'custom',
            path: ['sources', i, ...path],
            message:
              `${new URL(url).origin} is plain http off loopback: the Digest exchange and every ` +
              `response would cross the network readable and alterable; use https://, or set ` +
              `sources[${i}].allow_insecure_http: true if the network to it is trusted`,
          });
        if (insecureRemote(source.base_url)) refuse(source.base_url, ['base_url']);
        source.allowed_origins.forEach((allowed, j) => {
          if (insecureRemote(allowed)) refuse(allowed, ['allowed_origins', j]);
        });
      }
      // Each subject fetch reserves max_body_bytes of the page budget before it starts.
      if (source.max_body_bytes > source.max_page_bytes)
        ctx.addIssue({
          code: 'custom',
          path: ['sources', i, 'max_page_bytes'],
          message: `must be >= max_body_bytes (${source.max_body_bytes}): every subject fetch may reserve max_body_bytes of it`,
        });
      if (source.max_change_bytes > source.max_page_bytes)
        ctx.addIssue({
          code: 'custom',
          path: ['sources', i, 'max_change_bytes'],
          message: `must be <= max_page_bytes (${source.max_page_bytes})`,
        });
      if (source.base_url.startsWith('https:')) {
        source.allowed_origins.forEach((allowed, j) => {
          if (!allowed.startsWith('http:')) return;
          ctx.addIssue({
            code: 'custom',
            path: ['sources', i, 'allowed_origins', j],
            message: `${allowed} is http but base_url is https (never downgrade from https to http)`,
          });
        });
      }
    });
    reportDuplicates(
      config.sources.map((s) => s.name),
      'sources',
      'source',
      ctx,
    );
    reportDuplicates(
      config.sinks.map((s) => s.name),
      'sinks',
      'sink',
      ctx,
    );
    // A filter naming a source that does not exist is almost surely a typo that would
    // silently starve the sink.
    const known = config.sources.map((s) => s.name);
    config.sinks.forEach((sink, i) => {
      sink.filter.sources.forEach((source, j) => {
        if (!known.includes(source)) {
          ctx.addIssue({
            code: 'custom',
            path: ['sinks', i, 'filter', 'sources', j],
            message: `unknown source "${source}" (known: ${known.join(', ')})`,
          });
        }
      });
    });
  });

/**
 * http:// to a host that is not loopback (127.0.0.0/8, ::1, localhost): credentials and data
 * would leave the machine in clear. Loopback is allowed: nothing crosses a network.
 */
function insecureRemote(value: string): boolean {
  const url = parseUrl(value);
  return url !== undefined && url.protocol === 'http:' && !isLoopbackHost(url.hostname);
}

function isLoopbackHost(hostname: string): boolean {
  const host = hostname.toLowerCase().replace(/\.$/, '');
  if (host === 'localhost' || host === '[::1]') return true;
  // URL has already normalized any IPv4 spelling (0x7f.1, 2130706433) to dotted decimal.
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

function reportDuplicates(names: string[], list: string, what: string, ctx: z.RefinementCtx): void {
  const firstIndex = new Map<string, number>();
  names.forEach((n, i) => {
    const first = firstIndex.get(n);
    if (first === undefined) {
      firstIndex.set(n, i);
      return;
    }
    ctx.addIssue({
      code: 'custom',
      path: [list, i, 'name'],
      message: `duplicate ${what} name "${n}" (also ${list}[${first}].name)`,
    });
  });
}

// The parsed output must be exactly the FeedsyncConfig that the rest of the code relies on.
type Equals<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
const _schemaMatchesTypes: Equals<z.output<typeof configSchema>, FeedsyncConfig> = true;
void _schemaMatchesTypes;

/** One validation problem: the key path (`sources[1].base_url`) and what is wrong there. */
export interface ConfigIssue {
  path: string;
  message: string;
}

/** One ConfigError for all issues: the first carries `path`, the message has one line each. */
export function toConfigError(issues: readonly ConfigIssue[]): ConfigError {
  const [first, ...rest] = issues;
  if (first === undefined) return new ConfigError('', 'invalid configuration');
  const lines = [first.message, ...rest.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message))];
  return new ConfigError(first.path, lines.join('\n'));
}
