// One watcher per process over every Redis connection it makes (and BullMQ's duplicates of
// them): each failure is classified (redis-errors.ts), counted (`redis:error` →
// feedsync_redis_errors_total{kind}), logged once and then at most once a minute with the count,
// and remembered until the next success so /readyz can tell a refused permission or a replica
// from a working Redis. ioredis has no hook for failed commands other than sendCommand itself.
import { createHash } from 'node:crypto';
import type { Command, Redis } from 'ioredis';
import type { Logger } from 'pino';
import { errorMessage } from '../../core/errors.js';
import type { PipelineEvents, RedisErrorKind } from '../../core/events.js';
import { createLogRate, type LogRate } from '../../observability/log-rate.js';
import { redactUrlCredentials } from '../../observability/redact-text.js';
import { classifyRedisError, redisErrorHint } from './redis-errors.js';

/** Same roles as redis.ts (kept as a string here to avoid an import cycle). */
type Role = string;

export interface RedisProblem {
  role: Role;
  kind: RedisErrorKind;
  /** The command refused (upper case), or undefined for the connection itself. */
  command?: string;
  message: string;
  hint: string;
  /** When it was last seen (ms since epoch). */
  at: number;
}

export interface RedisMonitor {
  /** A connection (command undefined) or a command of `role` failed. */
  failed(role: Role, err: unknown, command?: CommandId): void;
  /** A connection of `role` became ready (command undefined) or a command of it succeeded. */
  succeeded(role: Role, command?: CommandId): void;
  /** What currently keeps this process from doing its job against Redis (for /readyz). */
  problems(): RedisProblem[];
  /** Rate-limited warning for a caller that handles (retries) a Redis failure itself. */
  warn(logger: Logger, err: unknown, fields: Record<string, unknown>, msg: string): void;
  /** Logs how many repeats of each line were left out since it was last logged. */
  close(): void;
}

/** A command as the monitor tracks it: scripts by their SHA1, others by name. */
export interface CommandId {
  key: string;
  /** Upper-case command name, for messages. */
  name: string;
}

export interface RedisMonitorOptions {
  logger: Logger;
  /** The Redis URL without credentials, for log lines. */
  where: string;
  events?: PipelineEvents;
  /** At most one line per repeated failure this often (default one minute). */
  intervalMs?: number;
  now?: () => number;
}

/**
 * A refused command not tried again for this long no longer counts against readiness: whatever
 * needs it retries well within that (a poll every minute at most, BullMQ's workers every 15 s,
 * Prometheus' scrapes), so only a one-off (a probe, a command of a path since given up) expires.
 */
const STALE_COMMAND_MS = 2 * 60_000;
// A failing connection reports again at every reconnect attempt (ioredis waits at most 2 s between
// them); one closed since (a short-lived probe) never reports its recovery.
const STALE_CONNECTION_MS = 30_000;
// Kinds a refused command can only have from a server reply: the ones retrying cannot fix. The
// others (timeouts, a closed connection) are the connection's own failure, reported by its 'error'.
const COMMAND_KINDS: ReadonlySet<RedisErrorKind> = new Set(['wrongpass', 'noperm', 'moved', 'readonly']);
// Probes whose refusal feedsync handles itself (managed Redis often forbids them): never a problem.
const OPTIONAL_COMMANDS = new Set(['info', 'config', 'role', 'client', 'acl', 'command', 'quit', 'cluster']);

export function createRedisMonitor(opts: RedisMonitorOptions): RedisMonitor {
  const now = opts.now ?? Date.now;
  const rate: LogRate = createLogRate({ intervalMs: opts.intervalMs, now });
  /** How to log a rate-limited line again, by its rate key (for close()). */
  const lines = new Map<string, (repeated: number) => void>();
  const problems = new Map<string, RedisProblem>();

  function limited(key: string, log: (repeated: number) => void): void {
    if (!lines.has(key) && lines.size >= 1000) lines.delete(lines.keys().next().value as string);
    lines.set(key, log);
    const admitted = rate.admit(key);
    if (admitted) log(admitted.repeated);
  }

  return {
    failed(role, err, command) {
      const kind = classifyRedisError(err);
      if (command && !COMMAND_KINDS.has(kind)) return;
      opts.events?.emit('redis:error', { kind });
      const message = redactUrlCredentials(errorMessage(err));
      const hint = redisErrorHint(err, kind);
      problems.set(problemKey(role, command), {
        role,
        kind,
        command: command?.name,
        message,
        hint,
        at: now(),
      });
      const what = command ? 'redis command refused' : 'redis connection error';
      // Numbers vary between repeats of one failure ("Retrying from scratch after 140ms", a port):
      // they do not make it another line.
      limited(`${kind}|${message.replace(/\d+/g, '#')}`, (repeated) =>
        opts.logger.warn(
          {
            redis: opts.where,
            role,
            kind,
            ...(command && { command: command.name }),
            err: message,
            ...(repeated > 0 && { repeated }),
          },
          `${what} (${kind}): ${hint}`,
        ),
      );
    },
    succeeded(role, command) {
      if (problems.size === 0) return;
      problems.delete(role);
      if (command) problems.delete(problemKey(role, command));
    },
    problems() {
      const at = now();
      for (const [key, p] of problems)
        if (at - p.at > (p.command === undefined ? STALE_CONNECTION_MS : STALE_COMMAND_MS))
          problems.delete(key);
      return [...problems.values()];
    },
    warn(logger, err, fields, msg) {
      const kind = classifyRedisError(err);
      const message = redactUrlCredentials(errorMessage(err));
      // A refused command was already logged, with what to do, by the connection's own hook.
      if (COMMAND_KINDS.has(kind)) {
        logger.debug({ ...fields, kind, err: message }, msg);
        return;
      }
      limited(`${msg}|${kind}|${message}`, (repeated) =>
        logger.warn({ ...fields, kind, err: message, ...(repeated > 0 && { repeated }) }, msg),
      );
    },
    close() {
      for (const { key, repeated } of rate.drain()) lines.get(key)?.(repeated);
    },
  };
}

function problemKey(role: Role, command: CommandId | undefined): string {
  return command ? `${role} ${command.key}` : role;
}

const monitors = new WeakMap<Redis, RedisMonitor>();

/**
 * A warning about a Redis failure that the caller retries, through the monitor of the connection
 * it happened on: once, then at most once a minute with a count, and at debug level when the
 * connection's own hook already reported it with what to do (a refused command).
 */
export function warnRedisFailure(
  client: Redis | undefined,
  logger: Logger,
  err: unknown,
  fields: Record<string, unknown>,
  msg: string,
): void {
  const monitor = client && monitors.get(client);
  if (monitor) monitor.warn(logger, err, fields, msg);
  else logger.warn({ ...fields, err: errorMessage(err) }, msg);
}

/**
 * Hooks `client` (and every duplicate of it, which BullMQ makes for its blocking connections) up
 * to `monitor`: connection errors and readiness, and the outcome of every command it sends.
 */
export function instrumentRedis(client: Redis, role: Role, monitor: RedisMonitor): Redis {
  monitors.set(client, monitor);
  client.on('error', (err: unknown) => monitor.failed(role, err));
  client.on('ready', () => monitor.succeeded(role));
  const send = client.sendCommand.bind(client) as (command: Command, ...rest: unknown[]) => unknown;
  const cluster = client as unknown as { refreshSlotsCache?: () => void };
  const refreshSlots =
    typeof cluster.refreshSlotsCache === 'function' ? () => cluster.refreshSlotsCache!() : undefined;
  // ioredis passes a command through sendCommand again when it flushes its offline queue.
  const watched = new WeakSet<Command>();
  // A cluster client passes the target node as a third argument: everything is handed on.
  client.sendCommand = ((command: Command, ...rest: unknown[]) => {
    const result = send(command, ...rest);
    if (!watched.has(command) && !OPTIONAL_COMMANDS.has(command.name.toLowerCase())) {
      watched.add(command);
      const id = commandId(command);
      command.promise.then(
        () => monitor.succeeded(role, id),
        (err: unknown) => {
          monitor.failed(role, err, id);
          // A cluster client that follows no redirection (the producer's, redis.ts) would learn of
          // a moved slot only at its next periodic refresh: re-read the slot map now.
          if (refreshSlots && classifyRedisError(err) === 'moved') refreshSlots();
        },
      );
    }
    return result;
  }) as Redis['sendCommand'];
  // Redis.duplicate(options) and Cluster.duplicate(nodes, options): the arguments pass as given.
  const duplicate = client.duplicate.bind(client) as (...args: unknown[]) => Redis;
  client.duplicate = ((...args: unknown[]) =>
    instrumentRedis(duplicate(...args), role, monitor)) as Redis['duplicate'];
  return client;
}

function commandId(command: Command): CommandId {
  const name = command.name.toLowerCase();
  // A script is the same whether sent by EVALSHA or (after NOSCRIPT) by EVAL with its body.
  if (name === 'evalsha') return { key: `script ${String(command.args[0])}`, name: 'EVALSHA' };
  if (name === 'eval') {
    const body = command.args[0];
    const sha = createHash('sha1')
      .update(typeof body === 'string' || Buffer.isBuffer(body) ? body : String(body))
      .digest('hex');
    return { key: `script ${sha}`, name: 'EVAL' };
  }
  return { key: name, name: name.toUpperCase() };
}
