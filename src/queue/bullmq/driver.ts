// The BullMQ driver behind the driver seam. Scaled mode keeps nothing on disk: cursors, seen_above
// and poll status are in Redis (source-state.ts), pollers hold fenced leases (lease.ts) and each
// page is one transaction (page-commit.ts). See docs/scaled-mode.md.
import type { DriverFactory, QueueDriver, SourceLeases, SourceState } from '../driver.js';
import { FeedsyncError } from '../../core/errors.js';
import { Releasers } from '../../releasers.js';
import { createBullmqAdmin } from './admin.js';
import { createBullmqDelivery } from './delivery.js';
import { leaseOwner } from '../../lease/rule.js';
import { createRedisSourceLeases, readLeaseHolder, type RedisSourceLeases } from './lease.js';
import { holdSource } from './source-hold.js';
import { producerSinks } from '../sink-positions.js';
import { redisPositionsAdmin } from './positions-admin.js';
import { createBullmqProducer, type BullmqProducer } from './producer.js';
import { closeRedis, createRedisConnection, openRedisEndpoint } from './redis.js';
import {
  assertRedisCredentials,
  assertRedisPersists,
  assertRedisTopology,
  assertSentinelKnowsMaster,
  checkRedisPolicy,
  redisAllowsInfo,
} from './redis-preflight.js';
import { redisReadinessCheck } from './redis-readiness.js';
import { createRedisSourceState } from './source-state.js';
import { KeySpace } from './names.js';
import { multiHostKind } from './redis-multi-host.js';

export type BullmqDriver = QueueDriver & {
  /** Sources whose lease this process holds (poll/run), for feedsync_source_leader. */
  leading(): string[];
};

export async function createBullmqDriver(ctx: Parameters<DriverFactory>[0]): Promise<BullmqDriver> {
  const { config, mode, logger } = ctx;
  // Every connection below (the producer's, admin's and delivery's too) shares this endpoint: its
  // TLS settings and one monitor that counts, logs and remembers Redis failures for /readyz.
  const endpoint = openRedisEndpoint(config.queue, { logger, events: ctx.events });
  // One Redis: every key under one hash tag. A Redis Cluster: one tag per source, its shard
  // queues included (names.ts).
  const sources = config.sources.map((s) => s.name);
  const prefix =
    multiHostKind(endpoint.url) === 'cluster'
      ? KeySpace.cluster(config.queue.prefix, sources, config.queue.shards)
      : KeySpace.single(config.queue.prefix);
  const polls = mode === 'run' || mode === 'poll';
  const delivers = mode === 'run' || mode === 'work';
  await assertRedisCredentials(endpoint, logger);
  await assertSentinelKnowsMaster(endpoint, logger);
  // The topology check learns whether INFO is allowed; behind Sentinel (not checked there), ask.
  await assertRedisTopology(endpoint, logger);
  endpoint.infoRefused ??= !(await redisAllowsInfo(endpoint, logger));
  if (mode !== 'ops') await checkRedisPolicy(endpoint, logger);
  // Before anything is read: a Redis that forgets would silently restart every source.
  if (polls)
    await assertRedisPersists(
      endpoint,
      config.queue.allow_volatile_redis,
      logger,
      config.queue.min_replicas_acked,
    );

  const releasers = new Releasers();
  // Last out (releasers run in reverse): the counts of repeated warnings are logged once all is shut.
  releasers.add('redis monitor', () => endpoint.monitor?.close());
  // Closing lets go of what Redis holds (leases, connections) as far as Redis answers; nothing of
  // it may fail a stop.
  const close = async (): Promise<void> => void (await releasers.close());
  try {
    const stateConnection = createRedisConnection(endpoint, 'admin', logger);
    releasers.add('state connection', () => closeRedis(stateConnection));
    const admin = createBullmqAdmin({
      queue: config.queue,
      sinkNames: config.sinks.map((s) => s.name),
      logger,
      keys: prefix,
    });
    releasers.add('admin', () => admin.close());
    const stored = createRedisSourceState(stateConnection, prefix);

    let leases: RedisSourceLeases | undefined;
    let producer: BullmqProducer | undefined;
    if (polls) {
      const l = createRedisSourceLeases({
        redisUrl: endpoint,
        prefix,
        sources,
        ttlMs: config.queue.lease_ttl_ms,
        logger,
        minReplicasAcked: config.queue.min_replicas_acked,
      });
      // Released after the producer closes (releasers run in reverse).
      releasers.add('source leases', () => l.close());
      leases = l;
      const p = createBullmqProducer({
        queue: config.queue,
        sinks: producerSinks(config),
        leases: l,
        logger,
        events: ctx.events,
        keys: prefix,
      });
      releasers.add('producer', () => p.close());
      producer = p;
    }
    const sourceLeases: SourceLeases = leases ?? {
      acquire: () => {
        throw new FeedsyncError(`feedsync ${mode} does not poll: it cannot lease a source`, false);
      },
      holder: (source) => readLeaseHolder(stateConnection, prefix, source),
      hold: (source) =>
        holdSource(
          stateConnection,
          prefix,
          source,
          config.queue.lease_ttl_ms,
          `${leaseOwner()} (cursor command)`,
          logger,
          config.queue.min_replicas_acked,
        ),
    };
    // A poller's own cursor writes (start_from latest) go through the fenced commit, like pages:
    // one that no longer holds the source writes nothing (commitPage refuses without the lease).
    const sourceState: SourceState = producer
      ? {
          ...stored,
          save: async (source, eventId, seenAbove) => {
            await producer.commitPage({ source, changes: [], cursor: eventId, seenAbove });
          },
        }
      : stored;

    const delivery = delivers
      ? createBullmqDelivery({
          queue: config.queue,
          sinks: ctx.sinks,
          events: ctx.events,
          logger,
          keys: prefix,
        })
      : undefined;

    return {
      producer,
      sourceState,
      leases: sourceLeases,
      delivery,
      admin,
      positions: redisPositionsAdmin(stateConnection, prefix, sources, producerSinks(config)),
      checks: { redis: redisReadinessCheck(stateConnection, endpoint.monitor) },
      leading: () => leases?.held() ?? [],
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
