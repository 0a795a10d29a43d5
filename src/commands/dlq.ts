import type { FeedsyncConfig } from '../config/types.js';
import { openOps } from './admin.js';

/** `feedsync dlq list | retry | drop [--sink NAME] [--key KEY] [--json]`. */
export async function dlqCommand(
  config: FeedsyncConfig,
  action: 'list' | 'retry' | 'drop',
  filter: { sink?: string; key?: string; json?: boolean; limit?: number },
  out: (s: string) => void,
): Promise<void> {
  const ops = await openOps(config);
  try {
    const f = { sink: filter.sink, key: filter.key };
    if (action === 'list') {
      const dead = await ops.admin.listDead(f, filter.limit ?? 100);
      if (filter.json) return out(JSON.stringify(dead, null, 2));
      if (!dead.length) return out('no dead letters');
      for (const d of dead)
        out(
          `${d.sink}\t${d.key}\t${d.change.event_type}\tattempts=${d.attempts}\t${new Date(d.failedAt).toISOString()}\t${d.error}`,
        );
      return;
    }
    const n = action === 'retry' ? await ops.admin.retryDead(f) : await ops.admin.dropDead(f);
    out(`${action === 'retry' ? 're-queued' : 'dropped'} ${n} dead letter${n === 1 ? '' : 's'}`);
  } finally {
    await ops.close();
  }
}
