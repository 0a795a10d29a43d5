// What the driver checks before it opens its connections: credentials and TLS (a refusal there
// never fixes itself, so start-up fails naming it instead of reconnecting forever), whether the
// user may run INFO, the eviction policy, and whether Redis keeps its data across a restart.
import { Redis } from 'ioredis';
import { connect as netConnect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import type { Logger } from 'pino';
import { ConfigError, FeedsyncError, errorMessage } from '../../core/errors.js';
import { classifyRedisError, redisErrorHint } from './redis-errors.js';
import { multiHostKind, parseMultiHostUrl } from './redis-multi-host.js';
import {
  describeTarget,
  onEveryPrimary,
  parseRedisUrl,
  redactRedisUrl,
  withClient,
  type RedisEndpoint,
  type RedisTarget,
} from './redis.js';

/** A refusal of the command itself (ACL, or renamed away on managed Redis), not a failure to reach Redis. */
function refused(err: unknown): boolean {
  return classifyRedisError(err) === 'noperm' || /unknown command/i.test(errorMessage(err));
}

/** The code and OpenSSL's reason when there is one (its full message is a source location). */
function failureText(err: unknown): string {
  const e = err as { code?: unknown; reason?: unknown };
  const reason = typeof e?.reason === 'string' ? e.reason : errorMessage(err);
  return typeof e?.code === 'string' && !reason.includes(e.code) ? `${e.code}: ${reason}` : reason;
}

/**
 * Wrong Redis credentials and a TLS setup the server refuses never fix themselves: fail start-up
 * with an error naming the cause instead of reconnecting forever (ioredis reports a refused AUTH
 * only as a closed connection, and a TLS failure as one more reconnect). An unreachable Redis is
 * not an error here (it may come up later; /readyz reports it meanwhile). Over rediss:// the
 * exchange uses the TLS settings the connections will use, so it fails the same way they would.
 */
export async function assertRedisCredentials(
  target: string | RedisEndpoint,
  logger: Logger,
  timeoutMs = 5_000,
): Promise<void> {
  const endpoint = typeof target === 'string' ? { url: target } : target;
  // Behind Sentinel the primary's address is known only by asking the sentinels: the first sentinel
  // is checked instead (TLS, and its own password); a refused AUTH of the data nodes then shows as
  // reconnects and in /readyz, not at start-up.
  const server = credentialTarget(endpoint);
  if (!server) return;
  const key = server.sentinel ? 'queue.redis_sentinel_password' : 'queue.redis_url';
  const where = redactRedisUrl(endpoint.url);
  const { tls } = server;
  if (!server.password && !tls) return;
  // A password is checked with AUTH; over TLS without one, PING shows whether the server wants one.
  const args = server.password
    ? ['AUTH', ...(server.username ? [server.username] : []), server.password]
    : ['PING'];
  const command = `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;
  let reply: string;
  try {
    reply = await exchange(
      { host: server.host, port: server.port },
      tls ? (endpoint.tls ?? {}) : undefined,
      command,
      timeoutMs,
    );
  } catch (err) {
    if (classifyRedisError(err) === 'tls')
      throw new FeedsyncError(
        `queue.redis_url: TLS with Redis at ${where} failed: ${redisErrorHint(err, 'tls')} (${failureText(err)})`,
        false,
        { cause: err },
      );
    logger.warn({ redis: where, err: failureText(err) }, 'redis not reachable at start-up; waiting for it');
    return;
  }
  if (reply.startsWith('-') && classifyRedisError(reply) === 'wrongpass')
    throw new FeedsyncError(
      server.password
        ? `${key}: Redis at ${where} rejected the credentials (${reply.slice(1)})`
        : server.sentinel
          ? `${key}: the sentinels at ${where} require a password (${reply.slice(1)}): set queue.redis_sentinel_password`
          : `${key}: Redis at ${where} requires a password (${reply.slice(1)}): put user and password in the URL`,
      false,
    );
}

/**
 * Behind Sentinel, everything waits on the sentinels naming the primary, and ioredis retries for
 * ever whatever they answer: a password the sentinels want, or a master name they do not know,
 * would leave the process waiting with nothing said. Ask the sentinels ourselves, in turn until one
 * answers, and name the key to fix. Sentinels that do not answer are left to the connections'
 * retries (and /readyz).
 */
export async function assertSentinelKnowsMaster(
  endpoint: RedisEndpoint,
  logger: Logger,
  timeoutMs = 5_000,
): Promise<void> {
  if (multiHostKind(endpoint.url) !== 'sentinel') return;
  const { hosts, tls, name } = parseMultiHostUrl(endpoint.url);
  const where = redactRedisUrl(endpoint.url);
  for (const { host, port } of hosts) {
    const sentinel = new Redis({
      host,
      port,
      ...(endpoint.sentinelPassword !== undefined && { password: endpoint.sentinelPassword }),
      ...(tls && { tls: endpoint.tls ?? {} }),
      lazyConnect: true,
      enableReadyCheck: false,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      connectTimeout: timeoutMs,
      commandTimeout: timeoutMs,
      enableOfflineQueue: false,
    });
    sentinel.on('error', () => undefined);
    try {
      await sentinel.connect();
      const address = await sentinel.call('SENTINEL', 'get-master-addr-by-name', name ?? '');
      if (address !== null) return;
      const known = ((await sentinel.call('SENTINEL', 'masters').catch(() => [])) as unknown[])
        .map((fields) => (Array.isArray(fields) ? fields[fields.indexOf('name') + 1] : undefined))
        .filter((n): n is string => typeof n === 'string');
      throw new FeedsyncError(
        `queue.redis_url: the sentinels at ${where} know no master named "${name}" ` +
          `(they monitor: ${known.length > 0 ? known.map((n) => `"${n}"`).join(', ') : 'none'}); ` +
          'put the name of their "sentinel monitor" line after the last /',
        false,
      );
    } catch (err) {
      if (err instanceof FeedsyncError) throw err;
      const kind = classifyRedisError(err);
      if (kind === 'wrongpass' || /NOAUTH/i.test(errorMessage(err)))
        throw new FeedsyncError(
          endpoint.sentinelPassword === undefined
            ? `queue.redis_sentinel_password: the sentinels at ${where} require a password (${errorMessage(err)}): set queue.redis_sentinel_password (their requirepass; the URL's password is the data nodes')`
            : `queue.redis_sentinel_password: the sentinels at ${where} rejected it (${errorMessage(err)})`,
          false,
        );
      if (kind === 'tls') throw err;
      logger.debug(
        { redis: where, sentinel: `${host}:${port}`, err: errorMessage(err) },
        'sentinel did not answer',
      );
    } finally {
      sentinel.disconnect();
    }
  }
}

interface CredentialTarget {
  host: string;
  port: number;
  tls: boolean;
  username?: string;
  password?: string;
  /** The first sentinel (with the sentinels' own password), not a data node. */
  sentinel?: boolean;
}

/** The server whose AUTH tells: the URL's, a cluster's first seed node, or the first sentinel. */
function credentialTarget(endpoint: RedisEndpoint): CredentialTarget | undefined {
  const url = endpoint.url;
  if (multiHostKind(url) === 'sentinel') {
    const { hosts, tls } = parseMultiHostUrl(url);
    const password = endpoint.sentinelPassword;
    return { ...hosts[0]!, tls, sentinel: true, ...(password !== undefined && { password }) };
  }
  if (multiHostKind(url) === 'cluster') {
    const { hosts, tls, username, password } = parseMultiHostUrl(url);
    return {
      ...hosts[0]!,
      tls,
      ...(username !== undefined && { username }),
      ...(password !== undefined && { password }),
    };
  }
  const parsed = parseRedisUrl(url);
  return {
    host: parsed.hostname.replace(/^\[|\]$/g, ''),
    port: Number(parsed.port || 6379),
    tls: parsed.protocol === 'rediss:',
    ...(parsed.username && { username: decodeURIComponent(parsed.username) }),
    ...(parsed.password && { password: decodeURIComponent(parsed.password) }),
  };
}

/** One raw RESP command over TCP or TLS; resolves with the first line of the reply. */
function exchange(
  address: { host: string; port: number },
  tls: RedisEndpoint['tls'] | undefined,
  command: string,
  timeoutMs: number,
): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const socket: Socket = tls
      ? tlsConnect({ ...address, ...tls })
      : netConnect({ host: address.host, port: address.port });
    socket.setTimeout(timeoutMs, () => socket.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    socket.once('error', reject);
    socket.once(tls ? 'secureConnect' : 'connect', () => socket.write(command));
    socket.once('data', (data: Buffer) => {
      resolve(data.toString('utf8').split('\r\n')[0]!);
      socket.end();
    });
    // A server that closes without a word (a TLS alert arrives as an error first).
    socket.once('close', () => reject(new Error('connection closed before an answer')));
  });
}

/**
 * Whether this Redis user may run INFO. BullMQ runs it on every new connection (a version check)
 * and fails without it, and ioredis' ready check warns on stderr; when it is refused the driver
 * turns both off. Not reaching Redis says nothing: assume it may (they then check as usual).
 */
export async function redisAllowsInfo(target: RedisTarget, logger: Logger): Promise<boolean> {
  // The probe's own connection must not run INFO in ioredis' ready check (it would warn on stderr).
  const probe: RedisEndpoint =
    typeof target === 'string' ? { url: target, infoRefused: true } : { ...target, infoRefused: true };
  return withClient(probe, logger, async (client) => {
    try {
      await client.info('server');
      return true;
    } catch (err) {
      if (!refused(err)) return true;
      reportInfoRefused(logger, err);
      return false;
    }
    // Not reaching it (a cluster without a slot map yet) says nothing either.
  }).catch(() => true);
}

function reportInfoRefused(logger: Logger, err: unknown): void {
  logger.info(
    { err: errorMessage(err) },
    "this Redis user may not run INFO: BullMQ's Redis version check is skipped (run Redis 6.2 or later)",
  );
}

/**
 * The URL's form must match the server: a cluster node behind a plain URL answers MOVED for most
 * keys, and a redis+cluster:// URL on a standalone server never gets a slot map (ioredis retries
 * for ever). Either way nothing would work, so start-up stops naming the form to use. Asked with
 * INFO server (`redis_mode`), else CLUSTER INFO; a user allowed neither, an unreachable Redis or
 * Sentinel (the primary is known only through the sentinels) is not checked here.
 */
export async function assertRedisTopology(endpoint: RedisEndpoint, logger: Logger): Promise<void> {
  const kind = multiHostKind(endpoint.url);
  if (kind === 'sentinel') return;
  const server = credentialTarget(endpoint);
  if (!server) return;
  // A plain connection to the URL's server, or to the cluster's first seed node.
  const url = kind === 'cluster' ? seedUrl(server) : endpoint.url;
  const probe: RedisEndpoint = { url, infoRefused: true, ...(endpoint.tls && { tls: endpoint.tls }) };
  const { mode, infoAllowed } = await withClient(probe, logger, (client) => redisMode(client, logger)).catch(
    () => ({ mode: undefined, infoAllowed: undefined }),
  );
  const where = redactRedisUrl(endpoint.url);
  if (kind === 'cluster' && mode === 'standalone')
    throw new FeedsyncError(
      `queue.redis_url: ${where} is not a Redis Cluster (the server runs standalone): name it with redis://host:port`,
      false,
    );
  if (mode === 'sentinel')
    throw new FeedsyncError(
      `queue.redis_url: ${where} is a Redis Sentinel, not a data node: name the sentinels and the ` +
        'master with redis+sentinel://host:26379[,host:port…]/<master name> (rediss+sentinel:// for TLS)',
      false,
    );
  if (kind !== 'cluster' && mode === 'cluster')
    throw new FeedsyncError(
      `queue.redis_url: Redis at ${where} is a Redis Cluster node: name the cluster with ` +
        'redis+cluster://host:port[,host:port…] (rediss+cluster:// for TLS)',
      false,
    );
  // Learnt on the way, for every connection: whether this user may run INFO (the same on every
  // node of a cluster).
  if (infoAllowed !== undefined) endpoint.infoRefused = !infoAllowed;
}

/** 'cluster' or 'standalone' as the server says (undefined when it may not be asked), and whether INFO may be run. */
async function redisMode(
  client: Redis,
  logger: Logger,
): Promise<{ mode: string | undefined; infoAllowed: boolean }> {
  try {
    return { mode: /^redis_mode:(\w+)/m.exec(await client.info('server'))?.[1], infoAllowed: true };
  } catch (err) {
    if (!refused(err)) throw err;
    reportInfoRefused(logger, err);
  }
  try {
    await client.call('CLUSTER', 'INFO');
    return { mode: 'cluster', infoAllowed: false };
  } catch (err) {
    if (/cluster support disabled/i.test(errorMessage(err)))
      return { mode: 'standalone', infoAllowed: false };
    return { mode: undefined, infoAllowed: false };
  }
}

function seedUrl(server: CredentialTarget): string {
  const host = server.host.includes(':') ? `[${server.host}]` : server.host;
  const auth =
    server.password === undefined
      ? ''
      : `${encodeURIComponent(server.username ?? '')}:${encodeURIComponent(server.password)}@`;
  return `${server.tls ? 'rediss' : 'redis'}://${auth}${host}:${server.port}`;
}

/**
 * BullMQ loses jobs if Redis evicts keys; warn when the server may. Managed Redis often disables
 * CONFIG: that is reported at debug level, not as a failure.
 */
export async function checkRedisPolicy(target: RedisTarget, logger: Logger): Promise<string | undefined> {
  return withClient(target, logger, async (client) => {
    const policies = await onEveryPrimary(client, (node) => readPolicy(node, logger));
    return policies.find((p) => p !== 'noeviction') ?? policies[0];
  }).catch((err: unknown) => {
    // Unreachable: nothing to warn about yet; /readyz reports Redis meanwhile.
    logger.debug({ err: errorMessage(err) }, 'cannot read redis maxmemory-policy');
    return undefined;
  });
}

async function readPolicy(client: Redis, logger: Logger): Promise<string | undefined> {
  let policy: string | undefined;
  try {
    const reply = (await client.config('GET', 'maxmemory-policy')) as unknown;
    if (Array.isArray(reply) && typeof reply[1] === 'string') policy = reply[1];
  } catch (err) {
    logger.debug({ err: errorMessage(err) }, 'cannot read redis maxmemory-policy (CONFIG disabled?)');
    return undefined;
  }
  if (policy !== undefined && policy !== 'noeviction') {
    logger.warn(
      { maxmemoryPolicy: policy },
      'redis maxmemory-policy is not noeviction: Redis may evict queued changes under memory pressure',
    );
  }
  return policy;
}

export interface RedisPersistence {
  /** undefined: this user may run neither CONFIG GET nor INFO, so nobody can tell here. */
  persists: boolean | undefined;
  /** How it was judged, for the log line and the refusal. */
  detail: string;
}

/**
 * Whether Redis keeps its data across a restart: AOF on, or RDB save points set. Managed Redis
 * often forbids CONFIG; INFO persistence then answers: AOF on, or at least one RDB snapshot taken
 * since start (`rdb_saves`, Redis 7+) counts as persisting. A user allowed neither gets "unknown".
 */
export async function readRedisPersistence(target: RedisTarget, logger: Logger): Promise<RedisPersistence> {
  // On a cluster every primary holds some sources' cursors: each must persist.
  return withClient(target, logger, async (client) => {
    const each = await onEveryPrimary(client, (node) => persistenceOf(node, logger));
    const detail = each.map((p) => p.detail).join('; ');
    if (each.some((p) => p.persists === false)) return { persists: false, detail };
    if (each.some((p) => p.persists === undefined)) return { persists: undefined, detail };
    return { persists: true, detail };
  });
}

async function persistenceOf(client: Redis, logger: Logger): Promise<RedisPersistence> {
  try {
    const aof = (await client.config('GET', 'appendonly')) as unknown;
    const save = (await client.config('GET', 'save')) as unknown;
    const aofOn = Array.isArray(aof) && aof[1] === 'yes';
    const savePoints = Array.isArray(save) && typeof save[1] === 'string' ? save[1].trim() : '';
    return {
      persists: aofOn || savePoints !== '',
      detail: `CONFIG: appendonly ${aofOn ? 'yes' : 'no'}, save "${savePoints}"`,
    };
  } catch (err) {
    logger.debug({ err: errorMessage(err) }, 'CONFIG GET refused; judging persistence from INFO');
  }
  let info: string;
  try {
    info = await client.info('persistence');
  } catch (err) {
    if (!refused(err)) throw err;
    return { persists: undefined, detail: 'this Redis user may run neither CONFIG GET nor INFO' };
  }
  const field = (name: string) => new RegExp(`^${name}:(.*)$`, 'm').exec(info)?.[1]?.trim();
  const aofOn = field('aof_enabled') === '1';
  const rdbSaves = Number(field('rdb_saves') ?? '0');
  return {
    persists: aofOn || rdbSaves > 0,
    detail: `INFO persistence: aof_enabled ${aofOn ? 1 : 0}, rdb_saves ${rdbSaves}`,
  };
}

/**
 * Scaled mode keeps cursors in Redis: a Redis that forgets its data on restart would make every
 * poller start over from `start_from`. Refuse to start on one unless the operator said it is fine.
 * A user that may not ask (neither CONFIG GET nor INFO) is warned, not refused: managed Redis
 * persists by its own settings, and refusing would make such a user unusable.
 */
export async function assertRedisPersists(
  target: RedisTarget,
  allowVolatile: boolean,
  logger: Logger,
  minReplicasAcked = 0,
): Promise<void> {
  let found: RedisPersistence;
  try {
    found = await readRedisPersistence(target, logger);
  } catch (err) {
    // Not knowing is not good enough: starting would read and write cursors on a Redis that may
    // forget them. The daemon retries the open (openDriverPatiently) until Redis answers.
    throw new FeedsyncError(
      `cannot check that Redis at ${describeTarget(target)} persists its data: ${errorMessage(err)}`,
      true,
      { cause: err },
    );
  }
  if (found.persists === undefined) {
    if (allowVolatile) logger.info({ persistence: found.detail }, 'redis persistence unknown (allowed)');
    else
      logger.warn(
        { persistence: found.detail },
        'cannot tell whether Redis persists its data (cursors live there): make sure it runs with AOF or RDB snapshots, ' +
          'or set queue.allow_volatile_redis: true to accept losing them when Redis restarts',
      );
    return;
  }
  if (found.persists) {
    logger.info({ persistence: found.detail }, 'redis persists its data');
    return;
  }
  // queue.min_replicas_acked: every commit waits for that many replicas (replication.ts), so a
  // primary with them keeps the cursors through the loss of one server without AOF.
  let replicas: ReplicaCount | undefined;
  if (minReplicasAcked > 0) {
    replicas = await readReplicaCount(target, logger).catch((err: unknown) => ({
      online: 0,
      detail: `INFO replication failed: ${errorMessage(err)}`,
    }));
    if (replicas.online >= minReplicasAcked) {
      logger.info(
        { persistence: found.detail, replication: replicas.detail, minReplicasAcked },
        'redis does not persist to disk, but commits wait for replicas (queue.min_replicas_acked)',
      );
      return;
    }
  }
  if (allowVolatile) {
    logger.warn(
      { persistence: found.detail },
      'redis does not persist (queue.allow_volatile_redis: true): cursors and queued changes are lost if it restarts',
    );
    return;
  }
  // A ConfigError, so the start fails rather than waits: the choice (persistence, replicas, or
  // accepting the loss) is the operator's, and a crash loop naming it is the visible place for it.
  throw new ConfigError(
    '',
    `Redis at ${describeTarget(target)} does not persist its data (${found.detail}` +
      (replicas ? `; ${replicas.detail}, queue.min_replicas_acked ${minReplicasAcked}` : '') +
      '); feedsync poll keeps its cursors there. Turn on AOF (appendonly yes) or RDB snapshots (save), ' +
      (minReplicasAcked > 0 ? 'attach the replicas queue.min_replicas_acked asks for, ' : '') +
      'or set queue.allow_volatile_redis: true to accept losing them when Redis restarts',
  );
}

interface ReplicaCount {
  online: number;
  detail: string;
}

/** Replicas attached to this primary and online (INFO replication); 0 on a replica. On a cluster, the fewest any primary has. */
async function readReplicaCount(target: RedisTarget, logger: Logger): Promise<ReplicaCount> {
  return withClient(target, logger, async (client) => {
    const each = await onEveryPrimary(client, async (node) => {
      const info = await node.info('replication');
      const role = /^role:(.*)$/m.exec(info)?.[1]?.trim() ?? 'unknown';
      const online = role === 'master' ? [...info.matchAll(/^slave\d+:.*state=online/gm)].length : 0;
      return { online, detail: `INFO replication: role ${role}, ${online} replica(s) online` };
    });
    return {
      online: Math.min(...each.map((c) => c.online)),
      detail: each.map((c) => c.detail).join('; '),
    };
  });
}
