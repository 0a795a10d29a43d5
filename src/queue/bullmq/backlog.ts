// Changes queued and not yet delivered, per sink: counters raised by the page commits and lowered
// by the workers (page-commit.ts, shard-lease.ts), one hash per queue tag. One Redis has one; a
// cluster has one per source (names.ts, KeySpace), plus those of the earlier layout's per-shard
// queues while they drain (legacy-layout.ts), and a sink's backlog is their sum.
import type { Redis } from 'ioredis';
import { backlogKey, keySpace, type Keys } from './names.js';

export async function readBacklogs(client: Redis, keys: Keys, sinks: string[]): Promise<Map<string, number>> {
  const out = new Map(sinks.map((sink) => [sink, 0]));
  if (sinks.length === 0) return out;
  const space = keySpace(keys);
  const tags: [string, string[]][] = [
    ...space.queueTags.map((tag): [string, string[]] => [tag, sinks]),
    ...sinks.flatMap((sink) => space.legacyQueueTags(sink).map((tag): [string, string[]] => [tag, [sink]])),
  ];
  const perTag = await Promise.all(
    tags.map(async ([tag, of]) => ({ of, counts: await client.hmget(backlogKey(tag), ...of) })),
  );
  for (const { of, counts } of perTag)
    of.forEach((sink, i) => out.set(sink, out.get(sink)! + Number(counts[i] ?? 0)));
  return out;
}
