// Per-sink positions for `status`, metrics and `replay` in Redis, from any process. A replay writes
// the sink's lagging entry and bumps its generation in one script; the source's poller sees it in
// its next commit (which WATCHes the generations, page-commit.ts) and catches the sink up.
import type { Redis } from 'ioredis';
import type { LaggingSink, LostUpstream, ReplayRequest, SinkPositionsAdmin } from '../queue.js';
import { MAX_PENDING_IDS, replayRefusal, ReplayRefused, type ProducerSink } from '../sink-positions.js';
import { readBacklogs } from './backlog.js';
import { knownSinksKey, laggingKey, lostKey, parkedIdsKey, sourceStateKey, type Keys } from './names.js';
import type { LaggingEntry } from './page-commit.js';
import { luaScript, runScript } from './scripts.js';

// KEYS: lagging-sinks hash, known-sinks hash. ARGV: sink, the entry, the generation the caller
// checked (its entry's, or '' when none). Refused when the sink was moved since (check again).
const REPLAY = luaScript(
  'replay',
  `
local current = redis.call('HGET', KEYS[2], ARGV[1]) or ''
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  if current ~= ARGV[3] then return 0 end
elseif ARGV[3] ~= '' and ARGV[3] ~= current then return 0 end
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1`,
);

/** The sinks off `source`'s shared stream, as Redis holds them now. */
export async function readLagging(
  client: Redis,
  prefix: Keys,
  source: string,
  sinks: ProducerSink[],
): Promise<LaggingSink[]> {
  const [entries, generations] = await Promise.all([
    client.hgetall(laggingKey(prefix, source)),
    client.hgetall(knownSinksKey(prefix, source)),
  ]);
  const lagging = Object.keys(entries);
  const backlogs = lagging.length ? await readBacklogs(client, prefix, lagging) : new Map<string, number>();
  const out: LaggingSink[] = [];
  for (const [sink, text] of Object.entries(entries)) {
    const entry = JSON.parse(text) as LaggingEntry;
    const pendingIds = await client.scard(parkedIdsKey(prefix, source, sink));
    out.push({
      source,
      sink,
      cursor: entry.cursor,
      seenAbove: Array.isArray(entry.seenAbove) ? entry.seenAbove : [],
      reason: entry.reason,
      since: entry.since,
      eventAt: entry.eventAt,
      generation: Number(generations[sink] ?? 0),
      pendingIds,
      idsTruncated: pendingIds >= MAX_PENDING_IDS,
      backlog: backlogs.get(sink) ?? 0,
      bound: sinks.find((s) => s.name === sink)?.maxBacklog ?? Number.MAX_SAFE_INTEGER,
    });
  }
  return out;
}

export function redisPositionsAdmin(
  client: Redis,
  prefix: Keys,
  sources: string[],
  sinks: ProducerSink[],
): SinkPositionsAdmin {
  return {
    async lost() {
      const out: LostUpstream[] = [];
      for (const source of sources) {
        for (const [sink, text] of Object.entries(await client.hgetall(lostKey(prefix, source)))) {
          const { count, ids, at } = JSON.parse(text) as { count: number; ids: unknown; at: number };
          out.push({ source, sink, count, ids: Array.isArray(ids) ? ids.map(Number) : [], at });
        }
      }
      return out;
    },
    lagging: async () =>
      (await Promise.all(sources.map((source) => readLagging(client, prefix, source, sinks)))).flat(),
    async replay(req: ReplayRequest) {
      const [text, generation, cursor] = await Promise.all([
        client.hget(laggingKey(prefix, req.source), req.sink),
        client.hget(knownSinksKey(prefix, req.source), req.sink),
        client.hget(sourceStateKey(prefix, req.source), 'cursor'),
      ]);
      const lag = text ? (JSON.parse(text) as LaggingEntry) : undefined;
      const sourceCursor = cursor === null ? undefined : Number(cursor);
      const refusal = replayRefusal(req, lag, sourceCursor);
      if (refusal) throw new ReplayRefused(refusal);
      const entry: LaggingEntry = { ...req.from, reason: 'replay', since: Date.now(), eventAt: 0 };
      const written = await runScript(
        client,
        REPLAY,
        [laggingKey(prefix, req.source), knownSinksKey(prefix, req.source)],
        [req.sink, JSON.stringify(entry), lag ? (generation ?? '') : ''],
      );
      if (Number(written) !== 1)
        throw new ReplayRefused(
          `sink ${req.sink} on source ${req.source} was moved while the replay was being written; run it again`,
        );
      return { before: lag ? lag.cursor : (sourceCursor ?? null) };
    },
  };
}
