import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Rng } from '../../src/sandbox/prng.js';
import { PipelineEvents } from '../../src/core/events.js';
import type { Change } from '../../src/core/change.js';
import { createBullmqDelivery } from '../../src/queue/bullmq/delivery.js';
import { createBullmqProducer } from '../../src/queue/bullmq/producer.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import {
  ANY,
  BatchRecordingSink,
  RecordingSink,
  makeChange,
  queueConfig,
  retryLater,
  silentLogger,
  waitFor,
} from './support.js';

let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis.stop();
});

/** A small seeded PRNG so a failing run can be reproduced from the printed seed. */
function mulberry32(seed: number): () => number {
  const rng = new Rng(seed);
  return () => rng.next();
}

describe('bullmq per-subject order', () => {
  it('keeps per-subject order across two delivery processes with random latency and retries', async () => {
    await checkOrder((plan, shared) => new RecordingSink(plan, shared));
  });

  it('keeps it with a batch sink too, batch failures included, never batching one subject twice', async () => {
    const sinks: BatchRecordingSink[] = [];
    const shared = await checkOrder((plan, record, random) => {
      const sink = new BatchRecordingSink(
        { ...plan, failBatch: () => (random() < 0.15 ? retryLater('flaky batch') : undefined) },
        record,
      );
      sinks.push(sink);
      return sink;
    });
    expect(sinks.flatMap((s) => s.sameSubjectBatches)).toEqual([]);
    const batches = sinks.flatMap((s) => s.batches);
    expect(batches.length).toBeGreaterThan(0);
    expect(Math.max(...batches.map((b) => b.length))).toBeGreaterThan(1);
    expect(shared.log.length).toBe(600);
  });
});

type Plan = { latencyMs: () => number; fail: () => Error | undefined };
type Shared = { inFlight: Map<string, number>; overlaps: string[]; log: Change[] };

/** 600 changes of 20 subjects through two delivery runners; checks no overlap and per-subject order. */
async function checkOrder(
  makeSink: (plan: Plan, shared: Shared, random: () => number) => RecordingSink,
): Promise<Shared> {
  const seed = Date.now() % 1_000_000;
  const random = mulberry32(seed);
  const config = queueConfig(redis.url, {
    shards: 8,
    concurrency: 4,
    attempts: 1_000,
    backoff_ms: 5,
    max_backoff_ms: 20,
  });
  const subjects = Array.from({ length: 20 }, (_, i) => `http://127.0.0.1:1/scheduling/api/titles/${i}`);
  // 20 subjects × 30 changes, interleaved at random in feed order.
  const pending = subjects.map(() => 30);
  const changes: Change[] = [];
  for (let id = 1; changes.length < 600; id++) {
    let s = Math.floor(random() * subjects.length);
    while (pending[s] === 0) s = (s + 1) % subjects.length;
    pending[s]!--;
    changes.push(makeChange(id, { subject: subjects[s]! }));
  }

  const shared: Shared = { inFlight: new Map<string, number>(), overlaps: [], log: [] };
  const plan: Plan = {
    latencyMs: () => Math.floor(random() * 4),
    fail: () => (random() < 0.15 ? retryLater('flaky') : undefined),
  };
  const runners = [0, 1].map(() =>
    createBullmqDelivery({
      queue: config,
      sinks: [{ name: 'mirror', sink: makeSink(plan, shared, random) }],
      events: new PipelineEvents(),
      logger: silentLogger,
    }),
  );
  const producer = createBullmqProducer({
    queue: config,
    sinks: [{ name: 'mirror', filter: ANY }],
    logger: silentLogger,
  });
  try {
    await Promise.all(runners.map((r) => r.start()));
    for (let i = 0; i < changes.length; i += 50) {
      const page = changes.slice(i, i + 50);
      await producer.commitPage({
        source: 'scheduling',
        changes: page,
        cursor: page.at(-1)!.event_id,
        seenAbove: [],
      });
    }
    await waitFor('600 deliveries', () => shared.log.length >= 600, 30_000);

    expect(shared.overlaps, `seed ${seed}`).toEqual([]);
    const firstSeen = new Set<string>();
    const lastBySubject = new Map<string, number>();
    for (const change of shared.log) {
      if (firstSeen.has(change.key)) continue;
      firstSeen.add(change.key);
      const previous = lastBySubject.get(change.subject_url!) ?? 0;
      expect(change.event_id, `seed ${seed}: ${change.subject_url}`).toBeGreaterThan(previous);
      lastBySubject.set(change.subject_url!, change.event_id);
    }
    expect(firstSeen.size).toBe(600);
    expect(shared.log).toHaveLength(600);
    return shared;
  } finally {
    await producer.close();
    await Promise.all(runners.map((r) => r.stop(5_000)));
  }
}
