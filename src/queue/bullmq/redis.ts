// Redis connections for the BullMQ driver. Each role gets the ioredis options its failure mode
// needs, every connection of a process shares its endpoint (URL, TLS settings, error monitor), and
// nothing here ever prints the URL with its password.
import clusterSlot from 'cluster-key-slot';
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import type { ConnectionOptions } from 'node:tls';
import type { Logger } from 'pino';
import type { QueueConfig } from '../../config/types.js';
import { withDeadline } from '../../backoff.js';
import { errorMessage, FeedsyncError } from '../../core/errors.js';
import type { PipelineEvents } from '../../core/events.js';
import { classifyRedisError } from './redis-errors.js';
import { createRedisMonitor, instrumentRedis, type RedisMonitor } from './redis-monitor.js';
import { multiHostKind, parseMultiHostUrl, redactMultiHostUrl } from './redis-multi-host.js';
import { redisTlsOptions } from './redis-tls.js';

/**
 * - worker: commands wait through an outage (BullMQ requires `maxRetriesPerRequest: null` for
 *   blocking connections; its workers then resume on their own when Redis returns).
 * - producer: fail fast (`enableOfflineQueue: false`) so commitPage throws while Redis is down and
 *   the poller retries later, instead of buffering pages in memory with the cursor held back; and
 *   never re-send a command after a reconnect (see ROLE_OPTIONS).
 * - admin / lock: short-lived or polling callers that must see errors promptly.
 */
export type RedisRole = 'worker' | 'producer' | 'admin' | 'lock';

export function requireRedisUrl(config: Pick<QueueConfig, 'redis_url'>): string {
  if (!config.redis_url) {
    throw new FeedsyncError('queue.redis_url: required when queue.driver is bullmq', false);
  }
  return config.redis_url;
}

/** The URL with any user:password removed, for logs and error messages. */
export function redactRedisUrl(url: string): string {
  if (multiHostKind(url)) return redactMultiHostUrl(url);
  try {
    const parsed = new URL(url);
    parsed.username = '';
    parsed.password = '';
    return parsed.toString();
  } catch {
    return '<invalid redis url>';
  }
}

/** Checks `url` (redis://, rediss://, or a Sentinel or Cluster form); a ConfigError-like failure names it. */
export function checkRedisUrl(url: string): void {
  if (!multiHostKind(url)) {
    parseRedisUrl(url);
    return;
  }
  try {
    parseMultiHostUrl(url);
  } catch (err) {
    throw new FeedsyncError(`queue.redis_url: ${(err as Error).message} (${redactRedisUrl(url)})`, false);
  }
}

export function parseRedisUrl(url: string): URL {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new FeedsyncError(`queue.redis_url: not a valid URL (${redactRedisUrl(url)})`, false);
  }
  if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') {
    throw new FeedsyncError(
      `queue.redis_url: expected redis:// or rediss://, got ${parsed.protocol} (${redactRedisUrl(url)})`,
      false,
    );
  }
  return parsed;
}

/** See ROLE_OPTIONS: no reply by then and a fenced command fails (a frozen Redis, a cut mid-command). */
const FENCED_COMMAND_TIMEOUT_MS = 5_000;

const ROLE_OPTIONS: Record<RedisRole, RedisOptions> = {
  worker: { maxRetriesPerRequest: null, enableReadyCheck: true },
  // Fenced writes (page commits, leases) are never re-sent on a new connection: a MULTI…EXEC
  // re-sent after a cut would run without its WATCH, i.e. unfenced. The caller retries instead.
  // ioredis then simply drops the commands that were in flight at the cut (their promises never
  // settle), so every command also has a deadline (`commandTimeout`): it fails instead of hanging.
  producer: {
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    connectTimeout: 5_000,
    autoResendUnfulfilledCommands: false,
    commandTimeout: FENCED_COMMAND_TIMEOUT_MS,
  },
  admin: { maxRetriesPerRequest: 2, connectTimeout: 5_000 },
  lock: {
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    connectTimeout: 5_000,
    autoResendUnfulfilledCommands: false,
    commandTimeout: FENCED_COMMAND_TIMEOUT_MS,
  },
};

/** Where and how every connection of a process reaches Redis. */
export interface RedisEndpoint {
  url: string;
  /** node:tls options from queue.redis_tls (ioredis' `tls`); absent: rediss:// alone, system CAs. */
  tls?: ConnectionOptions;
  /** queue.redis_sentinel_password: the sentinels' own password. */
  sentinelPassword?: string;
  /** Shared by all connections of the process (set by the driver; else one per connection). */
  monitor?: RedisMonitor;
  /**
   * This user may not run INFO (managed Redis; learnt at start-up). ioredis' ready check and
   * BullMQ's version check both run INFO on every new connection: they are turned off then.
   */
  infoRefused?: boolean;
}

// One endpoint per loaded queue config: its TLS files are read once, and the connections the
// producer, admin and delivery make from the same config share the driver's monitor.
type EndpointConfig = Pick<QueueConfig, 'redis_url' | 'redis_tls' | 'redis_sentinel_password'>;
const endpoints = new WeakMap<EndpointConfig, RedisEndpoint>();

/** The endpoint of `config` (built, TLS files read and checked, on first use). */
export function redisEndpoint(config: EndpointConfig): RedisEndpoint {
  let endpoint = endpoints.get(config);
  if (!endpoint) {
    const url = requireRedisUrl(config);
    checkRedisUrl(url);
    const tls = redisTlsOptions(config.redis_tls);
    endpoint = {
      url,
      ...(tls && { tls }),
      ...(config.redis_sentinel_password !== undefined && {
        sentinelPassword: config.redis_sentinel_password,
      }),
    };
    endpoints.set(config, endpoint);
  }
  return endpoint;
}

/**
 * The endpoint of `config` with this process's monitor: failures counted as `redis:error` events
 * and logged through one rate limit, whichever connection sees them. Called once by the driver.
 */
export function openRedisEndpoint(
  config: EndpointConfig,
  opts: { logger: Logger; events?: PipelineEvents },
): RedisEndpoint {
  const endpoint = redisEndpoint(config);
  endpoint.monitor = createRedisMonitor({
    logger: opts.logger,
    events: opts.events,
    where: redactRedisUrl(endpoint.url),
  });
  return endpoint;
}

/**
 * A replica refuses writes with READONLY. Behind a DNS name that a failover moved to the new
 * primary (managed Redis), a new connection reaches the primary: reconnect, without re-sending
 * the refused command (callers retry, as after any failure; fenced writes must not be re-sent).
 */
function reconnectOnError(err: Error): 1 | false {
  return classifyRedisError(err) === 'readonly' ? 1 : false;
}

/**
 * A new ioredis connection for `role`. Errors are classified, counted and logged (rate-limited,
 * URL redacted) by the endpoint's monitor rather than left as unhandled 'error' events;
 * reconnection is ioredis' own (it retries forever).
 */
export function createRedisConnection(
  target: string | RedisEndpoint,
  role: RedisRole,
  logger: Logger,
): Redis {
  const endpoint = typeof target === 'string' ? { url: target } : target;
  checkRedisUrl(endpoint.url);
  // Without INFO, ioredis' ready check would print a warning to stderr on every connection (and
  // skip itself); skipVersionCheck is BullMQ's option, which it reads from the connection's options
  // (ioredis keeps options it does not know, and duplicates copy them).
  const options: RedisOptions & { skipVersionCheck?: boolean } = {
    ...ROLE_OPTIONS[role],
    lazyConnect: false,
    reconnectOnError,
    ...(endpoint.tls && { tls: endpoint.tls }),
    ...(endpoint.infoRefused && { enableReadyCheck: false, skipVersionCheck: true }),
  };
  const kind = multiHostKind(endpoint.url);
  // Sentinel: ioredis asks the sentinels for the primary on every (re)connect, and
  // failoverDetector drops the connections as soon as they announce a new one (+switch-master).
  // BullMQ's copies (duplicate()) keep these options, so they follow the primary too.
  const client =
    kind === 'cluster'
      ? asRedis(createCluster(endpoint, role, options))
      : kind === 'sentinel'
        ? new Redis({ ...sentinelOptions(endpoint), ...options })
        : new Redis(endpoint.url, options);
  const monitor = endpoint.monitor ?? createRedisMonitor({ logger, where: redactRedisUrl(endpoint.url) });
  const instrumented = instrumentRedis(client, role, monitor);
  return kind === 'cluster' ? instrumented : reviveWhenEnded(instrumented);
}

/** Tried again this long after a connection ended that nobody closed. */
const REVIVE_MS = 200;

/**
 * ioredis ends a connection for good when its connector fails outright. Behind Sentinel that
 * happens when a reconnect (the failover detector's, on +switch-master) cuts into the sentinels'
 * answer still being awaited ("Connection is closed."): under load, a worker's lease connection
 * stayed dead after a failover and delivery stopped. A connection that ends without being closed
 * here (quit, disconnect) is connected again; BullMQ's copies too.
 */
function reviveWhenEnded(client: Redis): Redis {
  let closing = false;
  const quit = client.quit.bind(client);
  client.quit = ((...args: Parameters<Redis['quit']>) => {
    closing = true;
    return quit(...args);
  }) as Redis['quit'];
  const disconnect = client.disconnect.bind(client);
  client.disconnect = (reconnect?: boolean) => {
    if (!reconnect) closing = true;
    disconnect(reconnect);
  };
  client.on('end', () => {
    if (closing) return;
    setTimeout(() => {
      if (!closing && client.status === 'end') client.connect().catch(() => undefined);
    }, REVIVE_MS).unref();
  });
  const duplicate = client.duplicate.bind(client);
  client.duplicate = ((...args: Parameters<Redis['duplicate']>) =>
    reviveWhenEnded(duplicate(...args))) as Redis['duplicate'];
  return client;
}

function sentinelOptions(endpoint: RedisEndpoint): RedisOptions {
  const parsed = parseMultiHostUrl(endpoint.url);
  const tls = parsed.tls ? (endpoint.tls ?? {}) : undefined;
  return {
    sentinels: parsed.hosts,
    name: parsed.name!,
    role: 'master',
    failoverDetector: true,
    ...(tls && { tls, sentinelTLS: tls, enableTLSForSentinelMode: true }),
    ...(parsed.db !== undefined && { db: parsed.db }),
    ...(endpoint.sentinelPassword !== undefined && { sentinelPassword: endpoint.sentinelPassword }),
    ...(parsed.username !== undefined && { username: parsed.username }),
    ...(parsed.password !== undefined && { password: parsed.password }),
  };
}

/**
 * ioredis' cluster client: it learns the slots from the seed nodes, follows MOVED/ASK, and
 * re-reads the slots after a failover. Each node connection gets the role's options.
 *
 * Fenced writes (role producer) never follow a redirection: ioredis would re-send a redirected
 * MULTI…EXEC to the new node without the WATCH that fenced it on the old one. Such a commit
 * fails instead (the poller retries it, WATCH and all, on the right node), and the slots are
 * re-read every second so the retry finds it.
 */
function createCluster(endpoint: RedisEndpoint, role: RedisRole, node: RedisOptions): Cluster {
  const parsed = parseMultiHostUrl(endpoint.url);
  const tls = parsed.tls ? (endpoint.tls ?? {}) : undefined;
  const { enableOfflineQueue, enableReadyCheck, ...perNode } = node;
  const options: ClusterOptions = {
    scaleReads: 'master',
    ...(enableOfflineQueue !== undefined && { enableOfflineQueue }),
    // Its ready check (CLUSTER INFO) is itself refused while a node connection is still
    // handshaking when there is no offline queue, and a refused check drops every connection.
    ...(enableReadyCheck !== undefined && { enableReadyCheck }),
    ...(enableOfflineQueue === false && { enableReadyCheck: false }),
    ...(role === 'producer' && { maxRedirections: 0, slotsRefreshInterval: 1_000 }),
    // Certificates name the nodes as the cluster announces them: verify against that name, not
    // against an address a DNS lookup made of it (ioredis' advice for TLS clusters).
    ...(tls && { dnsLookup: (address: string, done: (err: null, a: string) => void) => done(null, address) }),
    redisOptions: {
      ...perNode,
      // A user that may not run INFO: each node connection's own ready check (INFO) would be
      // refused and ioredis would print a warning to stderr for every connection it makes.
      ...(endpoint.infoRefused && { enableReadyCheck: false }),
      ...(tls && { tls }),
      ...(parsed.username !== undefined && { username: parsed.username }),
      ...(parsed.password !== undefined && { password: parsed.password }),
    },
  };
  return new Cluster(parsed.hosts, options);
}

/**
 * The code is written against ioredis' Redis; a Cluster answers the same commands, routed by the
 * key's slot (keyless ones to some primary: see onEveryPrimary and nodeForKey for those that must
 * reach a given node).
 */
function asRedis(cluster: Cluster): Redis {
  return cluster as unknown as Redis;
}

export function isCluster(client: Redis): boolean {
  return (client as unknown) instanceof Cluster;
}

/** The connection of the primary that owns `key`'s slot (the client itself when not a cluster). */
export function nodeForKey(client: Redis, key: string): Redis {
  if (!isCluster(client)) return client;
  const cluster = client as unknown as Cluster;
  const owner = cluster.slots[clusterSlot(key)]?.[0];
  const node = cluster.nodes('master').find((n) => `${n.options.host}:${n.options.port}` === owner);
  if (!node) throw new FeedsyncError(`redis cluster: no primary known for the slot of ${key}`, true);
  return node;
}

/**
 * UNWATCH where the WATCH of `key` went. On a cluster a keyless command goes to any primary, and a
 * WATCH left behind on the right one aborts a later, unrelated EXEC there (a spurious race).
 */
export async function unwatchKey(client: Redis, key: string): Promise<void> {
  let node = client;
  try {
    node = nodeForKey(client, key);
  } catch {
    // No slot map for it: whatever connection held the WATCH is being replaced.
  }
  await node.unwatch();
}

/** `fn` on every primary (one answer when not a cluster): checks of the server, not of a key. */
export async function onEveryPrimary<T>(client: Redis, fn: (node: Redis) => Promise<T>): Promise<T[]> {
  if (!isCluster(client)) return [await fn(client)];
  if (!(await whenReady(client, ONE_OFF_READY_MS)))
    throw new FeedsyncError(
      `cannot reach the Redis Cluster (no slot map within ${ONE_OFF_READY_MS} ms)`,
      true,
    );
  return Promise.all((client as unknown as Cluster).nodes('master').map(fn));
}

/**
 * Resolves once `client` is ready, or after `timeoutMs` whatever its state. Connections without an
 * offline queue (producer, lock) reject commands sent before that, and BullMQ keeps a queue whose
 * first command (its version check) was rejected broken for good: wait before first use.
 */
export async function whenReady(client: Redis, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  if (!(await statusReady(client, timeoutMs))) return false;
  if (!isCluster(client)) return true;
  // A cluster client connects to each node on first use, and without an offline queue a command
  // that meets a node still connecting is refused at once ('Connection is closed'): the first
  // commands of a producer, sent together to every primary, would fail. Connect them all now.
  const nodes = (client as unknown as Cluster).nodes('master');
  const ready = await Promise.all(
    nodes.map((node) => {
      if (node.status === 'wait') node.connect().catch(() => undefined);
      return statusReady(node, Math.max(0, deadline - Date.now()));
    }),
  );
  return ready.every(Boolean);
}

function statusReady(client: Redis, timeoutMs: number): Promise<boolean> {
  if (client.status === 'ready') return Promise.resolve(true);
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      client.off('ready', done);
      resolve(client.status === 'ready');
    };
    const timer = setTimeout(done, timeoutMs);
    client.once('ready', done);
  });
}

/** Close a connection without waiting on a dead server: QUIT when connected, else disconnect. */
export async function closeRedis(client: Redis): Promise<void> {
  if (client.status === 'end') return;
  const ended = new Promise<void>((resolve) => client.once('end', () => resolve()));
  if (client.status === 'ready') {
    try {
      await Promise.race([client.quit(), delay(1_000)]);
    } catch {
      // Falls through to disconnect: the goal is only that no socket stays open.
    }
  }
  // Between reconnect attempts there is no socket: disconnect() only cancels the retry timer and
  // ioredis never emits 'end', so there is nothing to wait for.
  const waitForEnd = client.status !== 'reconnecting';
  client.disconnect(false);
  if (waitForEnd) await Promise.race([ended, delay(1_000)]);
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

/** A Redis URL or endpoint to connect to. */
export type RedisTarget = string | RedisEndpoint;

/** Run `fn` on a temporary admin connection to `target`, closed afterwards. */
export async function withClient<T>(
  target: RedisTarget,
  logger: Logger,
  fn: (client: Redis) => Promise<T>,
): Promise<T> {
  const client = createRedisConnection(target, 'admin', logger);
  try {
    // A cluster client holds its commands until it has a slot map, for ever when no node answers:
    // a one-off caller gets an error instead, as it would from a single server that is down.
    if (isCluster(client) && !(await whenReady(client, ONE_OFF_READY_MS)))
      throw new FeedsyncError(
        `cannot reach the Redis Cluster at ${redactRedisUrl(typeof target === 'string' ? target : target.url)} (no slot map within ${ONE_OFF_READY_MS} ms)`,
        true,
      );
    return await fn(client);
  } catch (err) {
    // ioredis says only that it gave up ("max retries per request"): name the server and the key.
    if (err instanceof FeedsyncError || classifyRedisError(err) !== 'unreachable') throw err;
    const url = redactRedisUrl(typeof target === 'string' ? target : target.url);
    throw new FeedsyncError(`queue.redis_url: cannot reach Redis at ${url}: ${errorMessage(err)}`, true, {
      cause: err,
    });
  } finally {
    await closeRedis(client);
  }
}

const ONE_OFF_READY_MS = 5_000;

/** PING with a deadline: true when Redis answered PONG (for /readyz). */
export async function pingClient(client: Redis, timeoutMs: number): Promise<boolean> {
  try {
    return (await withDeadline(client.ping(), timeoutMs)) === 'PONG';
  } catch {
    return false;
  }
}

/** The URL of `target` without credentials, for messages. */
export function describeTarget(target: RedisTarget): string {
  return redactRedisUrl(typeof target === 'string' ? target : target.url);
}
