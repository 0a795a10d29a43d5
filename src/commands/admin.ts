import type { FeedsyncConfig } from '../config/types.js';
import { pino } from 'pino';
import { PipelineEvents } from '../core/events.js';
import type { SourceState } from '../queue/driver.js';
import { LocalAdmin } from '../queue/local/admin.js';
import type { QueueAdmin } from '../queue/queue.js';
import { CursorStore, cursorStoreState } from '../store/cursors.js';
import { SqliteSourceLocks } from '../store/source-lock.js';
import { openStore } from '../store/store.js';

/** What the operations commands need, for either queue driver, from outside the daemon. */
export interface OpsHandles {
  cursors: SourceState;
  admin: QueueAdmin;
  /** Owner of a live poller lock on the source, or null. */
  lockHolder(source: string): Promise<string | null>;
  close(): Promise<void>;
}

export async function openOps(config: FeedsyncConfig): Promise<OpsHandles> {
  const sinkNames = config.sinks.map((s) => s.name);
  if (config.queue.driver === 'bullmq') {
    // Scaled mode: cursors, status and leases all live in Redis; no store file is opened.
    const { createBullmqDriver } = await import('../queue/bullmq/driver.js');
    const driver = await createBullmqDriver({
      config,
      mode: 'ops',
      sinks: [],
      events: new PipelineEvents(),
      logger: pino({ level: 'silent' }),
    });
    return {
      cursors: driver.sourceState!,
      admin: driver.admin,
      lockHolder: async (source) => (await driver.leases!.holder(source)) ?? null,
      close: () => driver.close(),
    };
  }
  const db = openStore(config.store.path);
  const cursors = new CursorStore(db);
  const locks = new SqliteSourceLocks(db);
  return {
    cursors: cursorStoreState(cursors),
    admin: new LocalAdmin(db, sinkNames),
    lockHolder: async (source) => locks.holder(source),
    close: async () => {
      db.close();
    },
  };
}
