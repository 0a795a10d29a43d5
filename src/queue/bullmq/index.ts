// The BullMQ queue driver: what the daemon and the CLI commands use.
export { createBullmqProducer, type BullmqProducer, type BullmqProducerOptions } from './producer.js';
export { createBullmqDelivery, type BullmqDeliveryOptions } from './delivery.js';
export { createBullmqAdmin, type BullmqAdmin, type BullmqAdminOptions } from './admin.js';
export { createBullmqDriver, bullmqDriverFactory, type BullmqDriver } from './driver.js';
export {
  createRedisSourceLeases,
  readLeaseHolder,
  type LeaseFence,
  type RedisSourceLeases,
} from './lease.js';
export { createRedisSourceState } from './source-state.js';
export {
  assertRedisCredentials,
  checkRedisPolicy,
  closeRedis,
  createRedisConnection,
  assertRedisPersists,
  pingRedis,
  readRedisPersistence,
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
  leaseKey,
  sourceStateKey,
} from './names.js';
export { changesOf, sliceJobId, type ChangeSlice } from './slice.js';
export type { DeadChange } from './dead-letters.js';
