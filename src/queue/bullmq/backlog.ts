// Changes queued and not yet delivered, per sink: counters raised by the page commits and lowered
// by the workers (page-commit.ts, shard-lease.ts), one hash per queue tag. One Redis has one; a
// cluster has one per source (names.ts, KeySpace), and a sink's backlog is their sum.
import type { Redis } from 'ioredis';
import { backlogKey, keySpace, type Keys } from './names.js';

export async function readBacklogs(client: Redis, keys: Keys, sinks: string[]): Promise<Map<string, number>> {
  const out = new Map(sinks.map((sink) => [sink, 0]));
  if (sinks.length === 0) return out;
  const perTag = await Promise.all(
    keySpace(keys)
      .queueTags()
      .map((tag) => client.hmget(backlogKey(tag), ...sinks)),
  );
  for (const counts of perTag)
    sinks.forEach((sink, i) => out.set(sink, out.get(sink)! + Number(counts[i] ?? 0)));
  return out;
}
