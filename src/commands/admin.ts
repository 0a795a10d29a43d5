import { pino } from 'pino';
import type { FeedsyncConfig } from '../config/types.js';
import { PipelineEvents } from '../core/events.js';
import type { QueueDriver, SourceLeases, SourceState } from '../queue/driver.js';
import { openQueueDriver } from '../queue/drivers.js';
import type { QueueAdmin, SinkPositionsAdmin } from '../queue/queue.js';

/** What the operations commands need, for any queue driver, from outside the daemon. */
export interface OpsHandles {
  sourceState: SourceState;
  leases: SourceLeases;
  admin: QueueAdmin;
  positions: SinkPositionsAdmin;
  close(): Promise<void>;
}

export async function openOps(config: FeedsyncConfig): Promise<OpsHandles> {
  const driver: QueueDriver = await openQueueDriver({
    config,
    mode: 'ops',
    sinks: [],
    events: new PipelineEvents(),
    logger: pino({ level: 'silent' }),
  });
  const { sourceState, leases, admin, positions } = driver;
  if (!sourceState || !leases) {
    await driver.close();
    throw new Error(`queue driver ${config.queue.driver} offers no source state for the ops commands`);
  }
  return { sourceState, leases, admin, positions, close: () => driver.close() };
}
