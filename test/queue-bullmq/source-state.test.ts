// The scaled mode's poll status in Redis is written as the local store's is: a run of alike
// successful polls at most once per interval, a failure or a change of state at once.
import { describe, expect, it } from 'vitest';
import { createRedisSourceState } from '../../src/queue/bullmq/source-state.js';
import { sourceStateKey } from '../../src/queue/bullmq/names.js';
import { useRedis } from './support.js';

const redis = useRedis();

describe('bullmq source state: recordPoll', () => {
  it('writes alike successes once per second, a failure and the recovery after it at once', async () => {
    const prefix = `t-${Date.now()}`;
    const state = createRedisSourceState(redis.client, prefix);
    const key = sourceStateKey(prefix, 'scheduling');
    // How many times the hash was written: every write sets last_poll_at to a fresh value.
    let writes = 0;
    const written = async () => {
      const at = await redis.client.hget(key, 'last_poll_at');
      await redis.client.hdel(key, 'last_poll_at');
      if (at !== null) writes++;
      return at !== null;
    };

    await state.recordPoll('scheduling', { ok: true, behind: true, lastEventAt: 1 });
    expect(await written()).toBe(true);
    for (let i = 0; i < 20; i++)
      await state.recordPoll('scheduling', { ok: true, behind: true, lastEventAt: 2 });
    // Twenty pages in well under a second: none written.
    expect(await written()).toBe(false);

    await state.recordPoll('scheduling', { ok: false, behind: false, error: 'HTTP 503' });
    expect(await written()).toBe(true);
    expect(await redis.client.hget(key, 'last_error')).toBe('HTTP 503');
    // The first success after a failure clears the error at once.
    await state.recordPoll('scheduling', { ok: true, behind: true });
    expect(await written()).toBe(true);
    expect(await redis.client.hget(key, 'last_error')).toBeNull();
    // Caught up: a change of state, written at once.
    await state.recordPoll('scheduling', { ok: true, behind: false });
    expect(await written()).toBe(true);
    expect(await redis.client.hget(key, 'behind')).toBe('0');
    // A second later an alike success is written again.
    await new Promise((r) => setTimeout(r, 1_050));
    await state.recordPoll('scheduling', { ok: true, behind: false, lastEventAt: 3 });
    expect(await written()).toBe(true);
    expect(await redis.client.hget(key, 'last_event_at')).toBe('3');
    expect(writes).toBe(5);
  });
});
