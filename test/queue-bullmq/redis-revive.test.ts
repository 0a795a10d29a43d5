// ioredis ends a connection for good when its connector fails outright (behind Sentinel: a
// reconnect that cuts into the sentinels' answer, "Connection is closed."). feedsync's connections
// connect again by themselves; one closed on purpose stays closed.
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { closeRedis, createRedisConnection } from '../../src/queue/bullmq/redis.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { waitFor } from '../support/harness.js';

const logger = pino({ level: 'silent' });

/** Makes the next connect of `client` fail in its connector, as the Sentinel race does. */
function failNextConnect(client: Redis): void {
  const connector = (client as unknown as { connector: { connect: (...a: unknown[]) => Promise<unknown> } })
    .connector;
  const connect = connector.connect.bind(connector);
  connector.connect = () => {
    connector.connect = connect;
    return Promise.reject(new Error('Connection is closed.'));
  };
}

describe('a connection ioredis ended on its own', () => {
  let redis: RedisServer;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it.each(['lock', 'worker'] as const)('is connected again (%s role), and a duplicate too', async (role) => {
    const client = createRedisConnection(redis.url, role, logger);
    const copy = client.duplicate();
    try {
      for (const c of [client, copy]) {
        await waitFor(() => c.status === 'ready', 5_000, 'ready');
        failNextConnect(c);
        c.disconnect(true);
        await waitFor(() => c.status === 'end', 5_000, 'ended by the failed connector');
        await waitFor(() => c.status === 'ready', 5_000, 'connected again');
        expect(await c.ping()).toBe('PONG');
      }
    } finally {
      await closeRedis(copy);
      await closeRedis(client);
    }
  });

  it('stays closed when closed on purpose', async () => {
    const client = createRedisConnection(redis.url, 'admin', logger);
    await waitFor(() => client.status === 'ready', 5_000, 'ready');
    await closeRedis(client);
    await new Promise((r) => setTimeout(r, 600));
    expect(client.status).toBe('end');
  });
});
