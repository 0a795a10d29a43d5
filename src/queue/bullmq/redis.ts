// Redis connections for the BullMQ driver. Each role gets the ioredis options its failure mode
// needs, and nothing here ever prints the URL with its password.
import { Redis, type RedisOptions } from 'ioredis';
import { connect as netConnect } from 'node:net';
import type { Logger } from 'pino';
import type { QueueConfig } from '../../config/types.js';
import { FeedsyncError, errorMessage } from '../../core/errors.js';

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
  try {
    const parsed = new URL(url);
    parsed.username = '';
    parsed.password = '';
    return parsed.toString();
  } catch {
    return '<invalid redis url>';
  }
}

function parseRedisUrl(url: string): URL {
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

/**
 * A new ioredis connection for `role`. Errors are logged (throttled, URL redacted) rather than
 * left as unhandled 'error' events; reconnection is ioredis' own (it retries forever).
 */
export function createRedisConnection(url: string, role: RedisRole, logger: Logger): Redis {
  parseRedisUrl(url);
  const client = new Redis(url, { ...ROLE_OPTIONS[role], lazyConnect: false });
  const where = redactRedisUrl(url);
  let lastLogged = 0;
  client.on('error', (err: unknown) => {
    const now = Date.now();
    // A down Redis emits an error per reconnect attempt; one line every 10 s is enough.
    if (now - lastLogged < 10_000) return;
    lastLogged = now;
    logger.warn({ redis: where, role, err: errorMessage(err) }, 'redis connection error');
  });
  return client;
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

/** Run `fn` on `target`; a URL gets a temporary admin connection that is closed afterwards. */
async function withClient<T>(
  target: string | Redis,
  logger: Logger,
  fn: (client: Redis) => Promise<T>,
): Promise<T> {
  if (typeof target !== 'string') return fn(target);
  const client = createRedisConnection(target, 'admin', logger);
  try {
    return await fn(client);
  } finally {
    await closeRedis(client);
  }
}

/** PING with a deadline: true when Redis answered PONG (for /readyz). */
export async function pingRedis(target: string | Redis, logger: Logger, timeoutMs = 2_000): Promise<boolean> {
  return withClient(target, logger, (client) => pingClient(client, timeoutMs));
}

async function pingClient(client: Redis, timeoutMs: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  try {
    const answer = await Promise.race([
      client.ping(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error('timeout')), timeoutMs);
      }),
    ]);
    return answer === 'PONG';
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * BullMQ loses jobs if Redis evicts keys; warn when the server may. Managed Redis often disables
 * CONFIG: that is reported at debug level, not as a failure.
 */
export async function checkRedisPolicy(target: string | Redis, logger: Logger): Promise<string | undefined> {
  return withClient(target, logger, (client) => readPolicy(client, logger));
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

const AUTH_REJECTED = /WRONGPASS|NOAUTH|invalid password|invalid username/i;

/**
 * Wrong Redis credentials never fix themselves: fail start-up with a clear error instead of
 * reconnecting forever. An unreachable Redis is not an error here (it may come up later; /readyz
 * reports it meanwhile).
 */
export async function assertRedisCredentials(url: string, logger: Logger, timeoutMs = 5_000): Promise<void> {
  const parsed = parseRedisUrl(url);
  // rediss: ioredis' own handshake reports it; a plain socket cannot speak TLS.
  if (!parsed.password || parsed.protocol === 'rediss:') return;
  // One raw AUTH over RESP: ioredis retries a refused AUTH forever and reports it only as a
  // closed connection, which is exactly what start-up must not do.
  const args = [
    'AUTH',
    ...(parsed.username ? [decodeURIComponent(parsed.username)] : []),
    decodeURIComponent(parsed.password),
  ];
  const command = `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;
  let reply: string;
  try {
    reply = await new Promise<string>((resolve, reject) => {
      const socket = netConnect({ host: parsed.hostname, port: Number(parsed.port || 6379) });
      socket.setTimeout(timeoutMs, () => socket.destroy(new Error(`no answer within ${timeoutMs} ms`)));
      socket.once('error', reject);
      socket.once('connect', () => socket.write(command));
      socket.once('data', (data: Buffer) => {
        resolve(data.toString('utf8').split('\r\n')[0]!);
        socket.end();
      });
    });
  } catch (err) {
    logger.warn(
      { redis: redactRedisUrl(url), err: errorMessage(err) },
      'redis not reachable at start-up; waiting for it',
    );
    return;
  }
  if (reply.startsWith('-') && AUTH_REJECTED.test(reply))
    throw new FeedsyncError(
      `queue.redis_url: Redis at ${redactRedisUrl(url)} rejected the credentials (${reply.slice(1)})`,
      false,
    );
}

export interface RedisPersistence {
  persists: boolean;
  /** How it was judged, for the log line and the refusal. */
  detail: string;
}

/**
 * Whether Redis keeps its data across a restart: AOF on, or RDB save points set. Managed Redis
 * often forbids CONFIG; INFO persistence then answers: AOF on, or at least one RDB snapshot taken
 * since start (`rdb_saves`, Redis 7+) counts as persisting.
 */
export async function readRedisPersistence(
  target: string | Redis,
  logger: Logger,
): Promise<RedisPersistence> {
  return withClient(target, logger, async (client) => {
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
    const info = await client.info('persistence');
    const field = (name: string) => new RegExp(`^${name}:(.*)$`, 'm').exec(info)?.[1]?.trim();
    const aofOn = field('aof_enabled') === '1';
    const rdbSaves = Number(field('rdb_saves') ?? '0');
    return {
      persists: aofOn || rdbSaves > 0,
      detail: `INFO persistence: aof_enabled ${aofOn ? 1 : 0}, rdb_saves ${rdbSaves}`,
    };
  });
}

/**
 * Scaled mode keeps cursors in Redis: a Redis that forgets its data on restart would make every
 * poller start over from `start_from`. Refuse to start on one unless the operator said it is fine.
 */
export async function assertRedisPersists(
  target: string | Redis,
  allowVolatile: boolean,
  logger: Logger,
): Promise<void> {
  let found: RedisPersistence;
  try {
    found = await readRedisPersistence(target, logger);
  } catch (err) {
    // Not knowing is not good enough: starting would read and write cursors on a Redis that may
    // forget them. The process exits; its supervisor restarts it once Redis answers.
    throw new FeedsyncError(
      `cannot check that Redis at ${typeof target === 'string' ? redactRedisUrl(target) : 'queue.redis_url'} persists its data: ${errorMessage(err)}`,
      true,
      { cause: err },
    );
  }
  if (found.persists) {
    logger.info({ persistence: found.detail }, 'redis persists its data');
    return;
  }
  if (allowVolatile) {
    logger.warn(
      { persistence: found.detail },
      'redis does not persist (queue.allow_volatile_redis: true): cursors and queued changes are lost if it restarts',
    );
    return;
  }
  throw new FeedsyncError(
    `Redis at ${typeof target === 'string' ? redactRedisUrl(target) : 'queue.redis_url'} does not persist its data (${found.detail}); ` +
      'feedsync poll keeps its cursors there. Turn on AOF (appendonly yes) or RDB snapshots (save), ' +
      'or set queue.allow_volatile_redis: true to accept losing them when Redis restarts',
    false,
  );
}
