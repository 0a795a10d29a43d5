import type { FeedsyncConfig } from '../config/types.js';
import { pino } from 'pino';
import { LocalAdmin } from '../queue/local/admin.js';
import type { QueueAdmin } from '../queue/queue.js';
import { CursorStore } from '../store/cursors.js';
import { SqliteSourceLocks } from '../store/source-lock.js';
import { openStore, type Db } from '../store/store.js';

/** What the operations commands need, for either queue driver, from outside the daemon. */
export interface OpsHandles {
  db: Db;
  cursors: CursorStore;
  admin: QueueAdmin;
  /** Owner of a live poller lock on the source, or null. */
  lockHolder(source: string): Promise<string | null>;
  close(): Promise<void>;
}

export async function openOps(config: FeedsyncConfig): Promise<OpsHandles> {
  const db = openStore(config.store.path);
  const sinkNames = config.sinks.map((s) => s.name);
  if (config.queue.driver === 'bullmq') {
    const { assertRedisCredentials, createBullmqAdmin, readSourceLockOwner } =
      await import('../queue/bullmq/index.js');
    await assertRedisCredentials(config.queue.redis_url!, pino({ level: 'silent' }));
    const admin = createBullmqAdmin({ queue: config.queue, sinkNames });
    return {
      db,
      cursors: new CursorStore(db),
      admin,
      lockHolder: (source) => readSourceLockOwner(config.queue.redis_url!, config.queue.prefix, source),
      close: async () => {
        await admin.close();
        db.close();
      },
    };
  }
  const locks = new SqliteSourceLocks(db);
  return {
    db,
    cursors: new CursorStore(db),
    admin: new LocalAdmin(db, sinkNames),
    lockHolder: async (source) => locks.holder(source),
    close: async () => {
      db.close();
    },
  };
}
