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
  closeRedis,
  createRedisConnection,
  openRedisEndpoint,
  pingRedis,
  redactRedisUrl,
  redisEndpoint,
  requireRedisUrl,
  type RedisEndpoint,
  type RedisRole,
} from './redis.js';
export {
  assertRedisCredentials,
  assertRedisPersists,
  checkRedisPolicy,
  readRedisPersistence,
  redisAllowsInfo,
} from './redis-preflight.js';
export {
  classifyRedisError,
  redisErrorHint,
  REDIS_ERROR_KINDS,
  type RedisErrorKind,
} from './redis-errors.js';
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
