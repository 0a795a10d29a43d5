// The driver's /readyz check for Redis. A PING alone says Redis answers, not that this process can
// do its job there: a replica answers PING and refuses every write, and a user missing one ACL
// permission answers PING and fails every poll. So the check also asks the server's ROLE, and
// fails while the monitor holds a failure that only the operator can fix.
import type { Redis } from 'ioredis';
import { errorMessage } from '../../core/errors.js';
import { classifyRedisError } from './redis-errors.js';
import type { RedisMonitor, RedisProblem } from './redis-monitor.js';
import { pingClient } from './redis.js';

/** How a problem reads in /readyz: kind, where, the server's words, what to do. */
export function describeRedisProblem(p: RedisProblem): string {
  const where = p.command ? `${p.role} connection, ${p.command}` : `${p.role} connection`;
  return `redis ${p.kind} (${where}): ${p.message}; ${p.hint}`;
}

/**
 * Throws (the reason is what /readyz shows) unless Redis answers PING, is a primary, and no
 * connection of this process has an unresolved failure. ROLE, then INFO replication, are asked
 * while allowed: a managed user without them is judged by PING and the monitor alone.
 */
export function redisReadinessCheck(
  client: Redis,
  monitor: RedisMonitor | undefined,
): () => Promise<boolean> {
  let roleQuery: 'role' | 'info' | 'none' = 'role';

  async function isReplica(): Promise<boolean> {
    while (roleQuery !== 'none') {
      try {
        if (roleQuery === 'role') {
          const reply = (await client.role()) as unknown[];
          return reply[0] === 'slave' || reply[0] === 'replica';
        }
        return /^role:slave\b/m.test(await client.info('replication'));
      } catch (err) {
        // Refused (ACL, or renamed on managed Redis): try the next way, once; anything else says
        // nothing about the role (PING already passed), so it is not a reason to be unready.
        if (classifyRedisError(err) !== 'noperm' && !/unknown command/i.test(errorMessage(err))) return false;
        roleQuery = roleQuery === 'role' ? 'info' : 'none';
      }
    }
    return false;
  }

  return async () => {
    const problems = monitor?.problems() ?? [];
    if (!(await pingClient(client, 2_000))) {
      const down = problems.filter((p) => p.command === undefined);
      throw new Error(
        down.length > 0 ? down.map(describeRedisProblem).join('; ') : 'redis does not answer PING',
      );
    }
    if (await isReplica())
      throw new Error('redis readonly: connected to a replica (ROLE); point queue.redis_url at the primary');
    if (problems.length > 0) throw new Error(problems.map(describeRedisProblem).join('; '));
    return true;
  };
}
