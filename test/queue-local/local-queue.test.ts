import { join } from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import type { QueueConfig } from '../../src/config/types.js';
import { NeverError, RetryLaterError } from '../../src/core/errors.js';
import type { Change } from '../../src/core/change.js';
import { PipelineEvents } from '../../src/core/events.js';
import { NEXT_RETRY_DUE } from '../../src/queue/local/delivery.js';
import { createLocalQueue } from '../../src/queue/local/index.js';
import type { Sink } from '../../src/sinks/sink.js';
import { CursorStore } from '../../src/store/cursors.js';
import { openStore, type Db } from '../../src/store/store.js';
import { tempDir, waitFor } from '../support/harness.js';

const queueConfig = (over: Partial<QueueConfig> = {}): QueueConfig => ({
  driver: 'local',
  prefix: 'feedsync',
  attempts: 4,
  backoff_ms: 5,
  max_backoff_ms: 20,
  concurrency: 4,
  max_backlog: 100_000,
  retain_completed_ms: 1000,
  retain_completed_count: 10,
  shards: 1,
  lease_ttl_ms: 15_000,
  allow_volatile_redis: false,
  ...over,
});
const noFilter = { sources: [], services: [], event_types: [], resource_types: [] };

let nextId = 1;
function change(subject: number, over: Partial<Change> = {}): Change {
  const id = nextId++;
  return {
    schema: 'feedsync.change.v1',
    key: `src:${id}`,
    source: 'src',
    service: 'workflow',
    event_id: id,
    event_type: 'job_updated',
    resource_type: 'job',
    operation: 'updated',
    occurred_at: new Date().toISOString(),
    changes: [],
    event_url: null,
    subject_url: `http://x/api/jobs/${subject}`,
    subject_state: 'skipped',
    subject: null,
    source_rule: null,
    ...over,
  };
}

/** Records deliveries, checks no subject is in flight twice, fails on demand. */
class RecordingSink implements Sink {
  delivered: Change[] = [];
  inFlight = new Set<string>();
  overlap = 0;
  constructor(
    private readonly fail: (c: Change) => Error | undefined = () => undefined,
    batches = false,
  ) {
    if (batches)
      this.deliverBatch = async (cs: Change[]) => {
        for (const c of cs) await this.deliver(c);
      };
  }
  deliverBatch?: (cs: Change[]) => Promise<void>;
  async deliver(c: Change): Promise<void> {
    if (this.inFlight.has(c.subject_url!)) this.overlap++;
    this.inFlight.add(c.subject_url!);
    try {
      await new Promise((r) => setTimeout(r, Math.random() * 3));
      const err = this.fail(c);
      if (err) throw err;
      if (!this.delivered.some((d) => d.key === c.key)) this.delivered.push(c);
    } finally {
      this.inFlight.delete(c.subject_url!);
    }
  }
  async close() {}
}

const opened: { db: Db; close: () => void; stop: () => Promise<void> }[] = [];
afterEach(async () => {
  for (const o of opened.splice(0)) {
    await o.stop();
    o.close();
    o.db.close();
  }
});

function setup(sinks: Record<string, Sink>, over: Partial<QueueConfig> = {}) {
  const db = openStore(join(tempDir(), 'store.db'));
  const cursors = new CursorStore(db);
  const events = new PipelineEvents();
  const q = createLocalQueue({
    db,
    cursors,
    queue: queueConfig(over),
    events,
    logger: pino({ level: 'silent' }),
    sinks: Object.keys(sinks).map((name) => ({ name, filter: noFilter })),
    runtimes: Object.entries(sinks).map(([name, sink]) => ({ name, sink })),
  });
  opened.push({ db, close: q.close, stop: () => q.delivery.stop(2000) });
  return { db, cursors, events, ...q };
}

describe('local queue', () => {
  it('finds the next retry through the partial index, not by scanning the backlog', () => {
    const { db } = setup({ s: new RecordingSink() });
    const plan = db.prepare(`EXPLAIN QUERY PLAN ${NEXT_RETRY_DUE}`).all('s', Date.now()) as {
      detail: string;
    }[];
    expect(plan.map((p) => p.detail).join('\n')).toMatch(/USING COVERING INDEX deliveries_retrying/);
  });

  it.each([false, true])(
    'keeps per-subject order under random failures with concurrency 4 (batches: %s)',
    async (batches) => {
      const flaky = new RecordingSink(
        (c) => (Math.random() < 0.2 ? new RetryLaterError(`flaky ${c.key}`) : undefined),
        batches,
      );
      const q = setup({ flaky }, { attempts: 50 });
      await q.delivery.start();
      const changes = Array.from({ length: 600 }, (_, i) => change(i % 20));
      for (let i = 0; i < changes.length; i += 50)
        await q.producer.commitPage({
          source: 'src',
          changes: changes.slice(i, i + 50),
          cursor: i + 50,
          seenAbove: [],
        });
      await waitFor(() => flaky.delivered.length === 600, 30_000, 'all delivered');
      expect(flaky.overlap).toBe(0);
      for (let s = 0; s < 20; s++) {
        const ids = flaky.delivered
          .filter((c) => c.subject_url === `http://x/api/jobs/${s}`)
          .map((c) => c.event_id);
        expect(ids).toEqual([...ids].sort((a, b) => a - b));
      }
    },
  );

  it('dead-letters after the attempts and at once on NeverError; other sinks are unaffected; dlq retry redelivers', async () => {
    let healed = false;
    const broken = new RecordingSink((c) =>
      healed ? undefined : c.event_id % 2 ? new NeverError('bad request') : new RetryLaterError('down'),
    );
    const fine = new RecordingSink();
    const q = setup({ broken, fine }, { attempts: 3 });
    const attempts = new Map<string, number>();
    q.events.on(
      'delivery:finished',
      (e) => e.sink === 'broken' && attempts.set(e.key, (attempts.get(e.key) ?? 0) + 1),
    );
    await q.delivery.start();
    const changes = Array.from({ length: 10 }, (_, i) => change(100 + i));
    await q.producer.commitPage({ source: 'src', changes, cursor: 10, seenAbove: [] });
    await waitFor(async () => (await q.admin.counts()).broken!.dead === 10, 10_000, 'ten dead letters');
    expect(fine.delivered).toHaveLength(10);
    for (const c of changes) expect(attempts.get(c.key)).toBe(c.event_id % 2 ? 1 : 3);
    const dead = await q.admin.listDead({ sink: 'broken' });
    expect(dead.map((d) => d.key).sort()).toEqual(changes.map((c) => c.key).sort());
    expect(dead.find((d) => d.change.event_id % 2)!.error).toMatch(/bad request/);
    healed = true;
    expect(await q.admin.retryDead({ sink: 'broken', key: changes[0]!.key })).toBe(1);
    await waitFor(() => broken.delivered.length === 1, 5000, 'redelivery');
    expect(await q.admin.dropDead({ sink: 'broken' })).toBe(9);
    expect((await q.admin.counts()).broken).toMatchObject({ dead: 0, waiting: 0 });
  });

  it('writes a page and its cursor in one transaction: a failed insert moves nothing', async () => {
    const q = setup({ s: new RecordingSink() });
    const page = Array.from({ length: 5 }, (_, i) => change(200 + i));
    q.db.exec(
      `CREATE TEMP TRIGGER boom BEFORE INSERT ON deliveries WHEN NEW.key = '${page[3]!.key}' BEGIN SELECT RAISE(ABORT, 'disk says no'); END`,
    );
    await expect(
      q.producer.commitPage({ source: 'src', changes: page, cursor: 99, seenAbove: [] }),
    ).rejects.toThrow(/disk says no/);
    expect(q.cursors.get('src')).toBeUndefined();
    expect((q.db.prepare('SELECT COUNT(*) AS n FROM deliveries').get() as { n: number }).n).toBe(0);
    q.db.exec('DROP TRIGGER boom');
    expect(
      await q.producer.commitPage({ source: 'src', changes: page, cursor: 99, seenAbove: [98] }),
    ).toEqual({ s: 5 });
    expect(q.cursors.get('src')).toEqual({ eventId: 99, seenAbove: [98] });
    expect(await q.producer.maxBacklog()).toBe(5);
  });

  it('with concurrency 1 delivers in strict queue order, a retrying change holding back the rest', async () => {
    let failures = 3;
    const sink = new RecordingSink(
      (c) => (c.event_id === first + 2 && failures-- > 0 ? new RetryLaterError('later') : undefined),
      true,
    );
    const q = setup({ sink }, { concurrency: 1 });
    const changes = Array.from({ length: 30 }, (_, i) => change(300 + (i % 7)));
    const first = changes[0]!.event_id;
    await q.producer.commitPage({ source: 'src', changes, cursor: 30, seenAbove: [] });
    await q.delivery.start();
    await waitFor(() => sink.delivered.length === 30, 10_000, 'all delivered');
    expect(sink.delivered.map((c) => c.event_id)).toEqual(changes.map((c) => c.event_id));
  });
});

describe('local queue throttling', () => {
  it('honours a Retry-After without spending attempts', async () => {
    let throttles = 4;
    const sink = new RecordingSink(() => (throttles-- > 0 ? new RetryLaterError('busy', 50) : undefined));
    const q = setup({ sink }, { attempts: 2 });
    const dead: string[] = [];
    q.events.on('delivery:finished', (e) => e.outcome === 'dead' && dead.push(e.key));
    await q.delivery.start();
    await q.producer.commitPage({ source: 'src', changes: [change(900)], cursor: 1, seenAbove: [] });
    await waitFor(() => sink.delivered.length === 1, 10_000, 'delivery after four throttled answers');
    expect(dead).toEqual([]);
  });
});
