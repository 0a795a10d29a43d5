// queue.min_replicas_acked: durability by replication. After a commit's EXEC (or a fenced cursor
// save), WAIT on the same connection until that many replicas acknowledged the writes; fewer within
// the timeout and the commit counts as not durable: a retryable error (the poller retries the
// page, which then finds its cursor committed and waits again before reporting it).
//
// WAIT covers the writes of the connection it runs on, up to its last write. A caller that did not
// just write on it (the 'already committed' path: the earlier try may have run on a connection
// since replaced) first makes one write (`touch`) so the wait covers everything written before.
import type { Redis } from 'ioredis';
import { FeedsyncError } from '../../core/errors.js';
import { nodeForKey } from './redis.js';

/** How long one WAIT lasts; under the fenced connections' command deadline (5 s, redis.ts). */
export const REPLICA_ACK_TIMEOUT_MS = 2_000;

export class NotReplicatedError extends FeedsyncError {
  constructor(what: string, acked: number, wanted: number) {
    super(
      `${what} is not durable: ${acked} of the ${wanted} replica(s) required by queue.min_replicas_acked ` +
        `acknowledged it within ${REPLICA_ACK_TIMEOUT_MS} ms; it is retried`,
      true,
    );
  }
}

/**
 * Resolves once `wanted` replicas acknowledged the connection's writes under `tag` (the hash tag
 * the caller wrote under: on a cluster, WAIT must run on that slot's primary, whose connection
 * made the writes). `touch`: write first (see above). wanted 0: nothing to do.
 */
export async function awaitReplicas(
  client: Redis,
  wanted: number,
  what: string,
  opts: { tag: string; touch?: boolean },
): Promise<void> {
  if (wanted <= 0) return;
  const probe = `${opts.tag}:replication-probe`;
  const node = nodeForKey(client, probe);
  if (opts.touch) await node.incr(probe);
  const acked = Number(await node.wait(wanted, REPLICA_ACK_TIMEOUT_MS));
  if (acked < wanted) throw new NotReplicatedError(what, acked, wanted);
}
