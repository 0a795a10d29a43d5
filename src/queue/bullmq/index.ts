// The BullMQ queue driver: its factory (the seam, ../driver.ts) and what its tests use.
import { CursorStore } from '../../store/cursors.js';
import { lockOwner } from '../../store/source-lock.js';
import { openStore } from '../../store/store.js';
import { Releasers } from '../../releasers.js';
import { modeDelivers, modePolls, type DriverFactory, type QueueDriver } from '../driver.js';
import { sqliteSourceState } from '../sqlite-source-state.js';
import { createBullmqAdmin } from './admin.js';
import { createBullmqDelivery } from './delivery.js';
import { createBullmqProducer } from './producer.js';
import { acquireSourceLock, readSourceLockOwner } from './source-lock.js';
import { assertRedisCredentials, checkRedisPolicy, pingRedis, requireRedisUrl } from './redis.js';

export { createBullmqProducer, type BullmqProducer, type BullmqProducerOptions } from './producer.js';
export { createBullmqDelivery, type BullmqDeliveryOptions } from './delivery.js';
export { createBullmqAdmin, type BullmqAdmin, type BullmqAdminOptions } from './admin.js';
export {
  acquireSourceLock,
  readSourceLockOwner,
  type SourceLock,
  type SourceLockOptions,
} from './source-lock.js';
export {
  assertRedisCredentials,
  checkRedisPolicy,
  closeRedis,
  createRedisConnection,
  pingRedis,
  redactRedisUrl,
  requireRedisUrl,
  type RedisRole,
} from './redis.js';
export {
  bullPrefix,
  deadQueueName,
  jobIdForKey,
  keyForJobId,
  shardOf,
  shardQueueName,
  sourceLockKey,
} from './names.js';
export { changesOf, sliceJobId, type ChangeSlice } from './slice.js';
export type { DeadChange } from './dead-letters.js';

/**
 * The bullmq driver's parts for `mode`. Cursors and poll status stay in the SQLite store for now;
 * the lease is a Redis key per source (source-lock.ts).
 */
export const createBullmqDriver: DriverFactory = async ({ config, mode, sinks, events, logger }) => {
  const redisUrl = requireRedisUrl(config.queue);
  const sinkNames = config.sinks.map((s) => s.name);
  const release = new Releasers();
  try {
    await assertRedisCredentials(redisUrl, logger);
    if (mode !== 'ops') await checkRedisPolicy(redisUrl, logger);
    const admin = createBullmqAdmin({ queue: config.queue, sinkNames });
    release.add('queue admin', () => admin.close());
    const driver: QueueDriver = {
      admin,
      checks: mode === 'ops' ? {} : { redis: () => pingRedis(redisUrl, logger) },
      close: async () => {
        await release.close();
      },
    };
    if (modePolls(mode) || mode === 'ops') {
      const db = openStore(config.store.path);
      release.add('store', () => db.close());
      const cursors = new CursorStore(db);
      driver.sourceState = sqliteSourceState(cursors);
      driver.checks.store = () => db.open;
      driver.leases = {
        acquire: async (source, signal) => {
          try {
            return await acquireSourceLock({
              redisUrl,
              prefix: config.queue.prefix,
              source,
              owner: lockOwner(),
              signal,
              logger: logger.child({ source }),
            });
          } catch (err) {
            if (signal.aborted) return undefined;
            throw err;
          }
        },
        holder: async (source) =>
          (await readSourceLockOwner(redisUrl, config.queue.prefix, source, logger)) ?? undefined,
      };
      if (modePolls(mode)) {
        const producer = createBullmqProducer({
          queue: config.queue,
          sinks: config.sinks.map((s) => ({ name: s.name, filter: s.filter })),
          saveCursor: (s, c, seen) => cursors.save(s, c, seen),
          logger,
        });
        release.add('queue producer', () => producer.close());
        driver.producer = producer;
      }
    }
    if (modeDelivers(mode))
      driver.delivery = createBullmqDelivery({ queue: config.queue, sinks, events, logger });
    return driver;
  } catch (err) {
    await release.close();
    throw err;
  }
};
