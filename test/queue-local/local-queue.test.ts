import { join } from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it, onTestFinished } from 'vitest';
import type { QueueConfig } from '../../src/config/types.js';
import { NeverError, RetryLaterError } from '../../src/core/errors.js';
import type { Change } from '../../src/core/change.js';
import { PipelineEvents } from '../../src/core/events.js';
import { NEXT_RETRY_DUE } from '../../src/queue/local/delivery.js';
import type { QueueDriver } from '../../src/queue/driver.js';
import { Backlog } from '../../src/queue/local/backlog.js';
import { LocalProducer } from '../../src/queue/local/producer.js';
import { CursorStore } from '../../src/store/cursors.js';
import { createLocalDriver } from '../../src/queue/local/index.js';
import type { Sink } from '../../src/sinks/sink.js';
import { openStore } from '../../src/store/store.js';
import { driverConfig } from '../queue/support.js';
import { tempDir, waitFor } from '../support/harness.js';

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

const opened: QueueDriver[] = [];
afterEach(async () => {
  for (const d of opened.splice(0)) {
    await d.delivery?.stop(2000);
    await d.close();
  }
});

async function setup(sinks: Record<string, Sink>, over: Partial<QueueConfig> = {}) {
  const dir = tempDir();
  const config = driverConfig(dir, Object.keys(sinks), over);
  const events = new PipelineEvents();
  const driver = await createLocalDriver({
    config,
    mode: 'run',
    events,
    logger: pino({ level: 'silent' }),
    sinks: Object.entries(sinks).map(([name, sink]) => ({ name, sink })),
  });
  opened.push(driver);
  // A second connection to the same store, for what only SQL can see.
  const db = openStore(config.store.path);
  onTestFinished(() => {
    db.close();
  });
  return {
    db,
    events,
    producer: driver.producer!,
    delivery: driver.delivery!,
    admin: driver.admin,
    sourceState: driver.sourceState!,
  };
}

describe('local queue', () => {
  it('finds the next retry through the partial index, not by scanning the backlog', async () => {
    const { db } = await setup({ s: new RecordingSink() });
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
      const q = await setup({ flaky }, { attempts: 50 });
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
    const q = await setup({ broken, fine }, { attempts: 3 });
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
    const db = openStore(join(tempDir(), 'store.db'));
    onTestFinished(() => {
      db.close();
    });
    const cursors = new CursorStore(db);
    const producer = new LocalProducer(
      db,
      cursors,
      [{ name: 's', filter: noFilter }],
      new Backlog(db, ['s']),
      () => undefined,
    );
    const page = Array.from({ length: 5 }, (_, i) => change(200 + i));
    db.exec(
      `CREATE TEMP TRIGGER boom BEFORE INSERT ON deliveries WHEN NEW.key = '${page[3]!.key}' BEGIN SELECT RAISE(ABORT, 'disk says no'); END`,
    );
    await expect(
      producer.commitPage({ source: 'src', changes: page, cursor: 99, seenAbove: [] }),
    ).rejects.toThrow(/disk says no/);
    expect(cursors.get('src')).toBeUndefined();
    expect((db.prepare('SELECT COUNT(*) AS n FROM deliveries').get() as { n: number }).n).toBe(0);
    db.exec('DROP TRIGGER boom');
    expect(await producer.commitPage({ source: 'src', changes: page, cursor: 99, seenAbove: [98] })).toEqual({
      s: 5,
    });
    expect(cursors.get('src')).toEqual({ eventId: 99, seenAbove: [98] });
    expect(await producer.maxBacklog()).toBe(5);
  });

  it('with concurrency 1 delivers in strict queue order, a retrying change holding back the rest', async () => {
    let failures = 3;
    const sink = new RecordingSink(
      (c) => (c.event_id === first + 2 && failures-- > 0 ? new RetryLaterError('later') : undefined),
      true,
    );
    const q = await setup({ sink }, { concurrency: 1 });
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
    const q = await setup({ sink }, { attempts: 2 });
    const dead: string[] = [];
    q.events.on('delivery:finished', (e) => e.outcome === 'dead' && dead.push(e.key));
    await q.delivery.start();
    await q.producer.commitPage({ source: 'src', changes: [change(900)], cursor: 1, seenAbove: [] });
    await waitFor(() => sink.delivered.length === 1, 10_000, 'delivery after four throttled answers');
    expect(dead).toEqual([]);
  });
});
