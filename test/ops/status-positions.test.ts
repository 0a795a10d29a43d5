// `feedsync status` and /metrics show each sink's position in each source (docs/sink-positions.md),
// for both drivers: a sink parked at its max_backlog beside a live one, then the ids it lost
// upstream once its catch-up rejoined the shared stream. The state is made through the driver seam,
// as the conformance suite does (pages committed with delivery stopped), and read the way the
// command and the daemon read it: from another driver opened in ops mode, and by the metrics.
import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { FeedsyncConfig } from '../../src/config/types.js';
import { statusCommand, type StatusReport } from '../../src/commands/status.js';
import { PipelineEvents } from '../../src/core/events.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { readSinkPositions, sinkPositionPairs } from '../../src/observability/sink-positions-view.js';
import type { QueueDriver } from '../../src/queue/driver.js';
import { openQueueDriver } from '../../src/queue/drivers.js';
import { parseSamples, sampleValue } from '../observability/prom-text.js';
import { driverConfig, makeChange, RecordingSink } from '../queue/support.js';
import { tempDir } from '../support/harness.js';
import { startRedis, type RedisServer } from '../support/redis.js';

describe.each(['local', 'bullmq'] as const)('status and metrics of sink positions, %s driver', (driver) => {
  let redis: RedisServer | undefined;
  const opened: QueueDriver[] = [];
  beforeAll(async () => {
    if (driver === 'bullmq') redis = await startRedis();
  });
  afterEach(async () => {
    for (const d of opened.splice(0)) await d.close();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  /** `late` is parked once 5 of its changes wait; `fast` keeps the default bound. Nothing delivers. */
  async function open(): Promise<{ config: FeedsyncConfig; driver: QueueDriver }> {
    const queue =
      driver === 'bullmq'
        ? { driver, redis_url: redis!.url, prefix: `st-${randomUUID().slice(0, 8)}` }
        : { driver };
    const config = driverConfig(tempDir(), ['late', 'fast'], queue);
    config.sinks[0]!.max_backlog = 5;
    const d = await openQueueDriver({
      config,
      mode: 'run',
      sinks: [
        { name: 'late', sink: new RecordingSink() },
        { name: 'fast', sink: new RecordingSink() },
      ],
      events: new PipelineEvents(),
      logger: pino({ level: 'silent' }),
    });
    opened.push(d);
    const lease = await d.leases?.acquire('src', new AbortController().signal, () => undefined);
    if (!lease) throw new Error('no lease for source src');
    return { config, driver: d };
  }

  async function status(config: FeedsyncConfig): Promise<{ json: StatusReport; text: string }> {
    const out: string[] = [];
    await statusCommand(config, { json: true }, (s) => out.push(s));
    await statusCommand(config, { json: false }, (s) => out.push(s));
    return { json: JSON.parse(out[0]!) as StatusReport, text: out[1]! };
  }

  it('shows a parked sink beside a live one, then the ids it lost upstream once it rejoined', async () => {
    const { config, driver: d } = await open();
    const producer = d.producer!;
    const pages = Array.from({ length: 3 }, (_, p) =>
      Array.from({ length: 3 }, (_, i) => makeChange(`status-${p}-${i}`)),
    );
    // Pages 1-2 are queued for both (late: 6 waiting, over its 5); page 3 parks late where it began.
    for (const [i, page] of pages.entries())
      await producer.commitPage({ source: 'src', changes: page, cursor: i + 1, seenAbove: [] });

    const before = Date.now();
    const parked = await status(config);
    expect(parked.json.positions).toEqual([
      {
        source: 'src',
        sink: 'late',
        state: 'parked',
        position: 2,
        lag_events: 1 + 6, // one id of the cursor beyond its position, six changes queued
        lag_seconds: expect.any(Number),
        queued: 6,
        reason: 'parked',
        since: expect.any(String),
        pending_ids: 3,
        ids_truncated: false,
        lost_upstream: null,
      },
      {
        source: 'src',
        sink: 'fast',
        state: 'live',
        position: 3,
        lag_events: 9,
        lag_seconds: null,
        queued: 9,
        reason: null,
        since: null,
        pending_ids: 0,
        ids_truncated: false,
        lost_upstream: null,
      },
    ]);
    const late = parked.json.positions[0]!;
    expect(Date.parse(late.since!)).toBeLessThanOrEqual(before);
    expect(late.lag_seconds).toBeGreaterThanOrEqual(0);
    // The fields that were there before are unchanged.
    expect(parked.json.sources).toMatchObject([{ source: 'src', cursor: 3 }]);
    expect(parked.json.sinks.map((s) => [s.sink, s.queued])).toEqual([
      ['late', 6],
      ['fast', 9],
    ]);
    expect(parked.text).toMatch(/^SINK\s+SOURCE\s+STATE\s+POSITION\s+LAG\s+QUEUED$/m);
    expect(parked.text).toMatch(/^late\s+src\s+parked\s+2\s+7 events, \d+s\s+6$/m);
    expect(parked.text).toMatch(/^fast\s+src\s+live\s+3\s+9 events\s+9$/m);
    expect(parked.text).toContain(
      `  late from src: off the shared stream since ${late.since} (parked); 3 ids passed while parked, not seen again yet`,
    );

    // /metrics, read the way the daemon reads it (every mode has the driver's positions).
    const metrics = createMetrics({
      events: new PipelineEvents(),
      sources: ['src'],
      sinks: ['late', 'fast'],
      version: 'x',
      queueCounts: () => d.admin.counts(),
      sinkPositions: async (counts) =>
        (
          await readSinkPositions(
            config,
            { sourceState: d.sourceState!, admin: d.admin, positions: d.positions },
            { counts },
          )
        ).views,
      sinkPairs: sinkPositionPairs(config),
    });
    try {
      const samples = parseSamples(await metrics.registry.metrics());
      const v = (name: string, labels: Record<string, string>) => sampleValue(samples, name, labels);
      expect(v('feedsync_sink_state', { source: 'src', sink: 'late', state: 'parked' })).toBe(1);
      expect(v('feedsync_sink_state', { source: 'src', sink: 'late', state: 'live' })).toBe(0);
      expect(v('feedsync_sink_state', { source: 'src', sink: 'fast', state: 'live' })).toBe(1);
      expect(v('feedsync_sink_position', { source: 'src', sink: 'late' })).toBe(2);
      expect(v('feedsync_sink_position', { source: 'src', sink: 'fast' })).toBe(3);
      expect(v('feedsync_sink_lag_events', { source: 'src', sink: 'late' })).toBe(7);
      expect(v('feedsync_sink_pending_ids', { source: 'src', sink: 'late' })).toBe(3);
      expect(v('feedsync_sink_lag_seconds', { source: 'src', sink: 'fast' })).toBe(0);
      expect(v('feedsync_sink_lost_upstream', { source: 'src', sink: 'late' })).toBe(0);
    } finally {
      metrics.close();
    }

    // Its catch-up reads page 3 again without its first event (the feed no longer lists it) and
    // rejoins the shared stream: that id is reported lost upstream.
    const [lag] = await producer.laggingSinks('src');
    const third = pages[2]!;
    const result = await producer.commitCatchUp({
      source: 'src',
      sink: 'late',
      generation: lag!.generation,
      reason: lag!.reason,
      since: lag!.since,
      changes: third.slice(1),
      cursor: 3,
      seenAbove: [],
      eventIds: third.slice(1).map((c) => c.event_id),
      eventAt: 0,
      join: true,
      from: { cursor: lag!.cursor, seenAbove: lag!.seenAbove },
      shared: { cursor: 3, seenAbove: [] },
    });
    expect(result.lost).toEqual([third[0]!.event_id]);

    const rejoined = await status(config);
    const back = rejoined.json.positions.find((p) => p.sink === 'late')!;
    expect(back).toMatchObject({
      state: 'live',
      position: 3,
      queued: 8,
      reason: null,
      since: null,
      pending_ids: 0,
      lost_upstream: { count: 1, ids: [third[0]!.event_id], at: expect.any(String) },
    });
    expect(Date.parse(back.lost_upstream!.at!)).toBeGreaterThanOrEqual(before);
    expect(rejoined.json.positions.find((p) => p.sink === 'fast')!.lost_upstream).toBeNull();
    expect(rejoined.text).toMatch(/^late\s+src\s+live\s+3\s+8 events\s+8$/m);
    expect(rejoined.text).toContain(
      `  late from src: 1 event lost upstream (passed while parked, no longer in the feed; last at ${back.lost_upstream!.at}, first id ${third[0]!.event_id})`,
    );
  });
});
