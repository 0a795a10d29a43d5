// What a poller keeps between pages, in Redis (scaled mode keeps nothing on disk): one hash per
// source under the source's hash tag, so it shares a slot with the source's queues and a page
// commit can write jobs and cursor in one transaction (page-commit.ts).
//
//   cursor        newer_than for the next request
//   seen_above    JSON array: ids above the cursor already queued (workflow overlap rule)
//   updated_at    epoch ms of the last cursor write
//   last_poll_at, last_ok_at, last_event_at (epoch ms), behind (0/1), last_error: for status/readyz
import type { Redis } from 'ioredis';
import { pollStatusThrottle } from '../../core/poll-status-throttle.js';
import type { PollOutcome, SourceState, SourceStatus, StoredCursor } from '../driver.js';
import { sourceStateKey, type Keys } from './names.js';

export type RedisSourceState = SourceState;

/** The hash fields a cursor write sets; page-commit.ts writes the same ones inside its transaction. */
export function cursorFields(eventId: number, seenAbove: readonly number[]): Record<string, string> {
  return { cursor: String(eventId), seen_above: JSON.stringify(seenAbove), updated_at: String(Date.now()) };
}

export function createRedisSourceState(client: Redis, prefix: Keys): RedisSourceState {
  const key = (source: string) => sourceStateKey(prefix, source);

  async function get(source: string): Promise<StoredCursor | undefined> {
    const [cursor, seen] = await client.hmget(key(source), 'cursor', 'seen_above');
    if (cursor === null || cursor === undefined) return undefined;
    return { eventId: Number(cursor), seenAbove: parseSeen(seen ?? null) };
  }

  /** Unfenced: only for processes that hold no lease (pollers save through the fenced commit, `cursor set/reset` through their hold). */
  async function save(source: string, eventId: number, seenAbove: number[]): Promise<void> {
    await client.hset(key(source), cursorFields(eventId, seenAbove));
  }

  const statusWrites = pollStatusThrottle();

  async function recordPoll(source: string, outcome: PollOutcome): Promise<void> {
    // As the local store does: alike successes at most once a second, any change at once.
    const at = Date.now();
    if (!statusWrites.due(source, outcome, at)) return;
    const now = String(at);
    const set: Record<string, string> = { last_poll_at: now };
    if (outcome.ok) {
      set.last_ok_at = now;
      set.behind = outcome.behind ? '1' : '0';
    }
    if (outcome.lastEventAt !== undefined) set.last_event_at = String(outcome.lastEventAt);
    if (outcome.error !== undefined) set.last_error = outcome.error;
    const tx = client.multi().hset(key(source), set);
    if (outcome.error === undefined) tx.hdel(key(source), 'last_error');
    await tx.exec();
    statusWrites.written(source, outcome, at);
  }

  async function status(sources: string[]): Promise<SourceStatus[]> {
    // One command per source: on a cluster the sources' hashes live in different slots.
    const replies = await Promise.all(sources.map((source) => client.hgetall(key(source))));
    return sources.map((source, i) => {
      const h = replies[i] ?? {};
      const num = (field: string) => (h[field] === undefined ? null : Number(h[field]));
      return {
        source,
        cursor: num('cursor'),
        lastPollAt: num('last_poll_at'),
        lastOkAt: num('last_ok_at'),
        lastEventAt: num('last_event_at'),
        behind: h.behind === '1',
        lastError: h.last_error ?? null,
      };
    });
  }

  return { get, save, recordPoll, status };
}

export function parseSeen(text: string | null): number[] {
  if (!text) return [];
  const parsed = JSON.parse(text) as unknown;
  return Array.isArray(parsed) ? parsed.filter((n): n is number => typeof n === 'number') : [];
}
