// Fencing tokens only grow, even when Redis forgets its last writes: a Redis restarted from an AOF
// cut short (or a replica promoted before it caught up) must not hand out a token already used,
// since the sqlite and postgres mirrors refuse any token below the highest they applied.
import { describe, expect, it } from 'vitest';
import { ACQUIRE } from '../../src/lease/redis-scripts.js';
import { runScript } from '../../src/queue/bullmq/scripts.js';
import { useRedis } from './support.js';

const redis = useRedis();

async function take(lease: string, counter: string, owner = 'w1'): Promise<number> {
  const reply = (await runScript(redis.client, ACQUIRE, [lease, counter], [owner, '60000'])) as [
    number,
    string,
  ];
  expect(reply[0], `the lease ${lease} was free`).toBeGreaterThan(0);
  expect(reply[1]).toBe(`${reply[0]} ${owner}`);
  await redis.client.del(lease);
  return Number(reply[0]);
}

async function redisNowMs(): Promise<number> {
  const [s, us] = await redis.client.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

describe('fencing tokens', () => {
  it('are at least the Redis clock in milliseconds, an exact integer', async () => {
    const before = await redisNowMs();
    const token = await take('t1:lease', 't1:token');
    expect(Number.isSafeInteger(token)).toBe(true);
    expect(token).toBeGreaterThanOrEqual(before);
    expect(await redis.client.get('t1:token')).toBe(String(token));
  });

  it('strictly grow when taken faster than the clock moves', async () => {
    const tokens: number[] = [];
    for (let i = 0; i < 200; i++) tokens.push(await take('t2:lease', 't2:token'));
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThan(tokens[i - 1]!);
  });

  it('grow past every token handed out before Redis lost its last writes', async () => {
    // Counters from the INCR era (small numbers) are passed at once: an upgrade keeps the order.
    await redis.client.set('t3:token', '66');
    // Taken at the rate the guarantee assumes (under 1,000 a second), so tokens follow the clock.
    const issued: number[] = [];
    for (let i = 0; i < 20; i++) {
      issued.push(await take('t3:lease', 't3:token'));
      await new Promise((r) => setTimeout(r, 2));
    }
    const highest = Math.max(...issued);
    expect(highest).toBeGreaterThan(66);
    // Redis comes back from a cut AOF: the counter is as it was some writes ago (or gone).
    await redis.client.set('t3:token', String(issued[5]));
    await new Promise((r) => setTimeout(r, 5));
    expect(await take('t3:lease', 't3:token')).toBeGreaterThan(highest);
    await redis.client.del('t3:token');
    expect(await take('t3:lease', 't3:token')).toBeGreaterThan(highest);
  });
});
