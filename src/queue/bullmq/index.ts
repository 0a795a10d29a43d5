// The BullMQ queue driver: what the daemon and the CLI commands use.
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
