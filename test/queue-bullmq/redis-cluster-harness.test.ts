// The Redis Cluster test harness itself (test/support/redis-cluster.ts): a password-protected
// 3 × (primary + replica) cluster of real redis-server processes, a slot moved while an ioredis
// Cluster client keeps writing to it (nothing lost), then a primary killed and its replica promoted
// (the client writes again and nothing acknowledged by the replica is lost).
import { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedisCluster, type RedisClusterSet } from '../support/redis-cluster.js';

const PASSWORD = 'cluster-test-pw';
const TAGGED = 200;
const SPREAD = 100;

let cluster: RedisClusterSet;
let client: Cluster;

beforeAll(async () => {
  cluster = await startRedisCluster({ password: PASSWORD });
  client = new Cluster([{ host: '127.0.0.1', port: cluster.ports[0] }], {
    redisOptions: { password: PASSWORD },
    retryDelayOnClusterDown: 100,
    retryDelayOnFailover: 100,
  });
  client.on('error', () => undefined);
}, 30_000);
afterAll(async () => {
  client?.disconnect();
  await cluster?.stop();
});

describe('redis cluster test harness', () => {
  it('forms a cluster of 3 primaries and 3 replicas; the url names the primaries without the password', async () => {
    const nodes = await cluster.nodes();
    expect(nodes.filter((n) => n.role === 'master')).toHaveLength(3);
    expect(nodes.filter((n) => n.role === 'replica')).toHaveLength(3);
    expect(cluster.ports).toHaveLength(6);
    // Compared with the password masked, so a failure never prints it.
    expect(cluster.url.replace(`:${PASSWORD}@`, ':***@')).toBe(
      `redis+cluster://:***@${cluster.ports
        .slice(0, 3)
        .map((p) => `127.0.0.1:${p}`)
        .join(',')}`,
    );
  });

  it('moves a slot while a client keeps incrementing a key in it: every INCR lands once', async () => {
    for (let i = 0; i < TAGGED; i++) await client.set(`{t}:${i}`, `v${i}`);
    for (let i = 0; i < SPREAD; i++) await client.set(`spread:${i}`, `s${i}`);
    const from = await cluster.ownerOf('{t}');
    const masters = (await cluster.nodes()).filter((n) => n.role === 'master').map((n) => n.port);
    const to = masters.find((p) => p !== from)!;

    let ok = 0;
    let failed = 0;
    let stopLoop = false;
    const loop = (async () => {
      while (!stopLoop) {
        try {
          await client.incr('{t}:counter');
          ok++;
        } catch {
          failed++;
        }
      }
    })();
    await new Promise((r) => setTimeout(r, 100));
    const okBefore = ok;
    const started = Date.now();
    const moved = await cluster.migrateSlotOf('{t}', to);
    const migrationMs = Date.now() - started;
    const okDuring = ok - okBefore;
    await new Promise((r) => setTimeout(r, 100));
    stopLoop = true;
    await loop;

    console.log(
      `migrated slot ${moved.slot} (${moved.keys} keys) ${moved.from} -> ${moved.to} in ${migrationMs} ms; ` +
        `${okDuring} INCRs during it, ${failed} failed`,
    );
    expect(moved).toMatchObject({ from, to });
    expect(moved.keys).toBeGreaterThanOrEqual(TAGGED);
    expect(okDuring).toBeGreaterThan(0);
    expect(failed).toBe(0);
    expect(Number(await client.get('{t}:counter'))).toBe(ok);
    expect(await cluster.ownerOf('{t}')).toBe(to);
    const values = await client.mget(...Array.from({ length: TAGGED }, (_, i) => `{t}:${i}`));
    expect(values).toEqual(Array.from({ length: TAGGED }, (_, i) => `v${i}`));
    for (let i = 0; i < SPREAD; i++) expect(await client.get(`spread:${i}`)).toBe(`s${i}`);
  });

  it("kills the slot's primary: its replica takes over, the client writes again, acknowledged data survives", async () => {
    // WAIT on the owner's connection (a pipeline goes to one node): the replica has everything
    // this primary had, the keys MIGRATE brought included.
    const [[setErr], [waitErr, acked]] = (await client
      .pipeline()
      .set('{t}:before-kill', 'yes')
      .call('WAIT', 1, 100)
      .exec())!;
    expect(setErr).toBeNull();
    expect(waitErr).toBeNull();
    expect(acked).toBe(1);

    const { killed, promoted, failoverMs } = await cluster.killPrimaryOf('{t}');
    const killedAt = Date.now() - failoverMs;
    expect(promoted).not.toBe(killed);
    expect(await cluster.ownerOf('{t}')).toBe(promoted);

    let wroteAgainMs: number | undefined;
    while (wroteAgainMs === undefined && Date.now() - killedAt < 10_000) {
      try {
        await client.set('{t}:after-kill', 'yes');
        wroteAgainMs = Date.now() - killedAt;
      } catch {
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    console.log(
      `killed ${killed}, ${promoted} promoted after ${failoverMs} ms; client wrote again after ${wroteAgainMs} ms`,
    );
    expect(wroteAgainMs).toBeDefined();
    expect(await client.get('{t}:before-kill')).toBe('yes');
    expect(Number(await client.get('{t}:counter'))).toBeGreaterThan(0);
    const values = await client.mget(...Array.from({ length: TAGGED }, (_, i) => `{t}:${i}`));
    expect(values).toEqual(Array.from({ length: TAGGED }, (_, i) => `v${i}`));
    const nodes = await cluster.nodes();
    expect(nodes.find((n) => n.port === promoted)?.role).toBe('master');
    expect(nodes.some((n) => n.port === killed)).toBe(false);
  });
});
