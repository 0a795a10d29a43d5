// config.queue.driver → its factory. BullMQ and ioredis weigh ~30 MB: the bullmq driver is
// imported only when configured, so `run` with the local driver never loads them.
import type { FeedsyncConfig } from '../config/types.js';
import type { DriverContext, DriverFactory, QueueDriver } from './driver.js';

const factories: Record<FeedsyncConfig['queue']['driver'], () => Promise<DriverFactory>> = {
  local: async () => (await import('./local/index.js')).createLocalDriver,
  bullmq: async () => (await import('./bullmq/index.js')).createBullmqDriver,
};

export async function openQueueDriver(ctx: DriverContext): Promise<QueueDriver> {
  const factory = await factories[ctx.config.queue.driver]();
  return factory(ctx);
}
