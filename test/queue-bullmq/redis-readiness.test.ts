// The driver's Redis readiness check against real servers: a primary is ready, a replica is not
// (ROLE, else INFO replication), a user allowed neither is judged by PING and by what its commands
// met (a write refused with READONLY), and a Redis that stopped answering is not ready.
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeRedis, createRedisConnection, type RedisEndpoint } from '../../src/queue/bullmq/redis.js';
import { createRedisMonitor } from '../../src/queue/bullmq/redis-monitor.js';
import { redisReadinessCheck } from '../../src/queue/bullmq/redis-readiness.js';
import { waitFor } from '../support/harness.js';
import { startRedis, type RedisServer } from '../support/redis.js';

const logger = pino({ level: 'silent' });
let primary: RedisServer;
let replica: RedisServer;
const clients: Redis[] = [];

beforeAll(async () => {
  [primary, replica] = await Promise.all([startRedis(), startRedis()]);
  const admin = new Redis(replica.url);
  clients.push(admin);
  await admin.replicaof('127.0.0.1', String(primary.port));
  await waitFor(
    async () => /master_link_status:up/.test(await admin.info('replication')),
    10_000,
    'replication',
  );
  for (const server of [primary, replica]) {
    const c = new Redis(server.url);
    clients.push(c);
    // A user without ROLE and INFO (managed Redis).
    await c.acl('SETUSER', 'app', 'on', '>pw', '~*', '&*', '+@all', '-role', '-info');
  }
});

afterAll(async () => {
  for (const c of clients) c.disconnect();
  await Promise.all([replica?.stop(), primary?.stop()]);
});

/** As the driver makes it: a monitor; `infoRefused` when the user may not run INFO. */
function endpoint(url: string, over: Partial<RedisEndpoint> = {}): RedisEndpoint {
  return { url, monitor: createRedisMonitor({ logger, where: url }), ...over };
}

async function connect(url: string, over: Partial<RedisEndpoint> = {}) {
  const ep = endpoint(url, over);
  const client = createRedisConnection(ep, 'admin', logger);
  clients.push(client);
  return { client, ep, check: redisReadinessCheck(client, ep.monitor) };
}

describe('redis readiness', () => {
  it('is ready on the primary and not on a replica, by ROLE', async () => {
    expect(await (await connect(primary.url)).check()).toBe(true);
    await expect((await connect(replica.url)).check()).rejects.toThrow(
      /^redis readonly: connected to a replica \(ROLE\); point queue\.redis_url at the primary$/,
    );
  });

  it('falls back to INFO replication when ROLE is refused, and to PING alone when both are', async () => {
    const noRole = new Redis(replica.url);
    clients.push(noRole);
    await noRole.acl('SETUSER', 'norole', 'on', '>pw', '~*', '&*', '+@all', '-role');
    await expect((await connect(`redis://norole:pw@127.0.0.1:${replica.port}`)).check()).rejects.toThrow(
      /connected to a replica/,
    );
    // Neither: a managed user is not unready for that, until a write is refused (READONLY).
    const { ep, check } = await connect(`redis://app:pw@127.0.0.1:${replica.port}`, { infoRefused: true });
    expect(await check()).toBe(true);
    const writer = createRedisConnection({ ...ep, infoRefused: true }, 'producer', logger);
    clients.push(writer);
    // The producer's connection does not queue commands while it connects.
    await new Promise((resolve) => writer.once('ready', resolve));
    await expect(writer.set('{feedsync}:k', 'v')).rejects.toThrow(/READONLY/);
    await expect(check()).rejects.toThrow(
      /^redis readonly \(producer connection, SET\): READONLY You can't write against a read only replica\.; connected to a replica: point queue\.redis_url at the primary$/,
    );
    await closeRedis(writer);
  });

  it('is not ready while Redis does not answer, naming the connection failure', async () => {
    const gone = await startRedis();
    const { client, check } = await connect(gone.url);
    await client.ping();
    expect(await check()).toBe(true);
    await gone.stop();
    await waitFor(() => client.status !== 'ready', 5_000, 'the connection to drop');
    await expect(check()).rejects.toThrow(
      /^(redis unreachable \(admin connection\): .*ECONNREFUSED|redis does not answer PING)/,
    );
  });
});
