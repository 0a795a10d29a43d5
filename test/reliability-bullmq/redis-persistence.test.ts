// Scaled mode keeps the cursors in Redis, so `feedsync poll` refuses a Redis that persists nothing
// (no AOF, no RDB save point) with a message that says what to do, unless the operator accepts it
// with queue.allow_volatile_redis. `work` holds no state and starts either way.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { tempDir } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig } from '../support/process.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import { bullmqConfig, stopGracefully, waitStarted } from './support.js';

describe('scaled mode: Redis persistence check', () => {
  let sandbox: Sandbox;
  let volatile: RedisServer;
  const dir = tempDir('feedsync-rb-volatile-');

  beforeAll(async () => {
    [sandbox, volatile] = await Promise.all([
      startSandbox({ seed: 5, backlog: 20, rate: 0 }),
      startRedis({ snapshots: false }),
    ]);
  });
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
    await volatile?.stop();
  });

  const config = (queue: Record<string, unknown> = {}) =>
    bullmqConfig(sandbox, dir, volatile.url, {
      queue,
      sinks: [{ name: 'file', type: 'jsonl', path: './changes.jsonl' }],
    });

  it(
    'poll refuses to start on a Redis without persistence, naming the fix',
    { timeout: 30_000 },
    async () => {
      const poll = spawnCli(['poll'], { config: writeConfig(dir, config(), 'strict.yaml') });
      const exit = await poll.waitForExit(20_000);
      expect(exit.code, poll.text()).not.toBe(0);
      const text = poll.text();
      expect(text).toMatch(/does not persist its data \(CONFIG: appendonly no, save ""\)/);
      expect(text).toMatch(/appendonly yes/);
      expect(text).toMatch(/queue\.allow_volatile_redis: true/);
      expect(text).not.toMatch(/feedsync started/);
      // It wrote nothing anywhere: no store file either.
      expect(existsSync(join(dir, 'feedsync.db'))).toBe(false);
    },
  );

  it(
    'starts with queue.allow_volatile_redis: true, warning what is at stake',
    { timeout: 30_000 },
    async () => {
      const path = writeConfig(dir, config({ allow_volatile_redis: true }), 'volatile.yaml');
      const poll = spawnCli(['poll'], { config: path });
      const work = spawnCli(['work'], { config: path });
      await waitStarted(poll, work);
      expect(poll.logs().some((e) => /redis does not persist/.test(e.msg ?? '') && e.level === 40)).toBe(
        true,
      );
      const exits = await stopGracefully([poll, work], 5_000);
      for (const exit of exits) expect(exit).toMatchObject({ code: 0, signal: null });
      expect(existsSync(join(dir, 'feedsync.db'))).toBe(false);
    },
  );
});
