// The conformance suite every queue driver passes (one *.test.ts per driver calls it with a harness):
// the delivery guarantees of docs/guarantees.md, through the driver seam only (src/queue/driver.ts).
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import type { FeedsyncConfig } from '../../src/config/types.js';
import { NeverError, RetryLaterError } from '../../src/core/errors.js';
import type { Change } from '../../src/core/change.js';
import { PipelineEvents } from '../../src/core/events.js';
import type { QueueDriver } from '../../src/queue/driver.js';
import { openQueueDriver } from '../../src/queue/drivers.js';
import type { SinkJobCounts } from '../../src/queue/queue.js';
import type { Sink } from '../../src/sinks/sink.js';
import { tempDir, waitFor } from '../support/harness.js';
import { makeChange, RecordingSink } from './support.js';

export interface DriverHarness {
  /** A config for the driver under test with these sinks, in `dir`, isolated from other tests. */
  config(dir: string, sinks: string[], queue?: Record<string, unknown>): FeedsyncConfig;
  /** How long a change in flight in a SIGKILLed process may take to be taken up again. */
  recoveryMs: number;
}

const CHILD = resolve(import.meta.dirname, 'fixtures/driver-child.mjs');

interface Opened {
  driver: QueueDriver;
  events: PipelineEvents;
  /** 'delivery:finished' outcomes per key, in order. */
  outcomes: Map<string, string[]>;
  commit(changes: Change[], perPage?: number): Promise<void>;
  counts(sink: string): Promise<SinkJobCounts>;
}

export function describeQueueDriverConformance(name: string, harness: DriverHarness): void {
  describe(`${name}: queue driver conformance`, () => {
    const opened: QueueDriver[] = [];
    const children: ChildProcess[] = [];
    afterEach(async () => {
      for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
      for (const driver of opened.splice(0)) {
        await driver.delivery?.stop(2_000);
        await driver.close();
      }
    });

    /** Opens the driver in `run` mode with these sinks; `start` false leaves delivery stopped. */
    async function open(
      sinks: Record<string, Sink>,
      queue: Record<string, unknown> = {},
      start = true,
    ): Promise<Opened> {
      const config = harness.config(tempDir(), Object.keys(sinks), queue);
      const events = new PipelineEvents();
      const outcomes = new Map<string, string[]>();
      events.on('delivery:finished', (e) => {
        for (const { key } of e.changes) outcomes.set(key, [...(outcomes.get(key) ?? []), e.outcome]);
      });
      const driver = await openQueueDriver({
        config,
        mode: 'run',
        sinks: Object.entries(sinks).map(([n, sink]) => ({ name: n, sink })),
        events,
        logger: pino({ level: 'silent' }),
      });
      opened.push(driver);
      const producer = driver.producer;
      if (!producer || !driver.delivery)
        throw new Error(`${name} offers no producer or delivery in run mode`);
      // Pages are committed only by the holder of the source's lease (a fenced commit with bullmq);
      // driver.close() releases it.
      const lease = await driver.leases?.acquire('src', new AbortController().signal, () => undefined);
      if (!lease) throw new Error(`${name} offers no lease for the source in run mode`);
      if (start) await driver.delivery.start();
      let cursor = 0;
      return {
        driver,
        events,
        outcomes,
        async commit(changes, perPage = 50) {
          for (let i = 0; i < changes.length; i += perPage)
            await producer.commitPage({
              source: 'src',
              changes: changes.slice(i, i + perPage),
              cursor: ++cursor,
              seenAbove: [],
            });
        },
        async counts(sink) {
          const all = await driver.admin.counts();
          const c = all[sink];
          if (!c) throw new Error(`no counts for sink ${sink}: ${JSON.stringify(all)}`);
          return c;
        },
      };
    }

    const drained = (c: SinkJobCounts): boolean =>
      c.waiting === 0 && c.active === 0 && c.delayed === 0 && c.failed === 0;

    it.each([false, true])(
      'keeps per-subject order under concurrency, with random latency and retries (batches: %s)',
      async (batches) => {
        const sink = new RecordingSink({
          batches,
          latencyMs: () => Math.random() * 3,
          fail: () => (Math.random() < 0.15 ? new RetryLaterError('flaky') : undefined),
        });
        const q = await open({ sink }, { concurrency: 4, shards: 4, attempts: 100 });
        const changes = Array.from({ length: 400 }, (_, i) => makeChange(`order-${i % 20}`));
        await q.commit(changes);
        await waitFor(() => new Set(sink.keys()).size === 400, 60_000, 'all 400 delivered');
        expect(sink.overlaps).toEqual([]);
        const bySubject = new Map<string, number[]>();
        for (const c of sink.delivered)
          bySubject.set(c.subject_url!, [...(bySubject.get(c.subject_url!) ?? []), c.event_id]);
        expect(bySubject.size).toBe(20);
        for (const ids of bySubject.values()) expect(ids).toEqual([...ids].sort((a, b) => a - b));
      },
    );

    it('reports every outcome as an event: retries, then ok with its timings; a bad occurred_at has no end-to-end time', async () => {
      const [flaky, steady] = [makeChange('events-a'), makeChange('events-b')];
      const odd = { ...makeChange('events-c'), occurred_at: 'not a time' };
      const sink = new RecordingSink({
        fail: (c, attempt) =>
          c.key === flaky.key && attempt <= 2 ? new RetryLaterError('later') : undefined,
      });
      const q = await open({ sink }, { attempts: 5 });
      const ok = new Map<string, { durationSeconds: number; endToEndSeconds?: number }>();
      q.events.on('delivery:finished', (e) => {
        if (e.outcome === 'ok')
          for (const c of e.changes) ok.set(c.key, { durationSeconds: e.durationSeconds, ...c });
      });
      await q.commit([flaky, steady, odd]);
      await waitFor(() => ok.size === 3, 20_000, 'three ok events');
      expect(q.outcomes.get(flaky.key)).toEqual(['retry', 'retry', 'ok']);
      expect(q.outcomes.get(steady.key)).toEqual(['ok']);
      expect(ok.get(steady.key)!.endToEndSeconds).toBeGreaterThanOrEqual(1);
      expect(ok.get(steady.key)!.durationSeconds).toBeGreaterThanOrEqual(0);
      expect(ok.get(odd.key)!.endToEndSeconds).toBeUndefined();
      await waitFor(async () => drained(await q.counts('sink')), 10_000, 'sink drained');
      expect(await q.counts('sink')).toEqual({ waiting: 0, active: 0, delayed: 0, failed: 0, dead: 0 });
    });

    it('delivers in total queue order at concurrency 1 and one shard, a retrying change holding back the rest', async () => {
      const changes = Array.from({ length: 30 }, (_, i) => makeChange(`total-${i % 7}`));
      const held = changes[2]!.key;
      const sink = new RecordingSink({
        fail: (c, attempt) => (c.key === held && attempt <= 3 ? new RetryLaterError('later') : undefined),
      });
      const q = await open({ sink }, { concurrency: 1, shards: 1 });
      await q.commit(changes, 10);
      await waitFor(() => sink.delivered.length === 30, 20_000, 'all 30 delivered');
      expect(sink.keys()).toEqual(changes.map((c) => c.key));
      expect(sink.attempts.get(held)).toBe(4);
    });

    it('waits as a Retry-After asks without spending attempts, holding back the subject', async () => {
      const [change, next] = [makeChange('throttled'), makeChange('throttled')];
      const sink = new RecordingSink({
        fail: (c, attempt) =>
          c.key === change.key && attempt <= 3 ? new RetryLaterError('busy', 150) : undefined,
      });
      const q = await open({ sink }, { attempts: 2, backoff_ms: 5, max_backoff_ms: 2_000 });
      const at = new Map<string, number>();
      q.events.on('delivery:finished', (e) => {
        if (!at.has(e.outcome)) at.set(e.outcome, Date.now());
      });
      await q.commit([change, next]);
      await waitFor(
        () => sink.delivered.length === 2,
        20_000,
        'both delivered after three throttled answers',
      );
      expect(sink.keys()).toEqual([change.key, next.key]);
      expect(q.outcomes.get(change.key)).toEqual(['retry', 'retry', 'retry', 'ok']);
      // Three waits of 150 ms as asked, not the 5 ms backoff.
      expect(at.get('ok')! - at.get('retry')!).toBeGreaterThanOrEqual(400);
      expect((await q.counts('sink')).dead).toBe(0);
    });

    it('waits as a Retry-After on a batch asks, retrying the batch as one call, not change by change at once', async () => {
      const changes = Array.from({ length: 5 }, (_, i) => makeChange(`batch-${i}`));
      const calls: { n: number; at: number }[] = [];
      const delivered: string[] = [];
      let refusals = 0;
      const sink: Sink = {
        async deliver(c) {
          calls.push({ n: 1, at: Date.now() });
          delivered.push(c.key);
        },
        async deliverBatch(cs) {
          calls.push({ n: cs.length, at: Date.now() });
          if (refusals++ < 2) throw new RetryLaterError('busy', 200);
          delivered.push(...cs.map((c) => c.key));
        },
        async close() {},
      };
      const q = await open({ sink }, { concurrency: 1, shards: 1, backoff_ms: 5, max_backoff_ms: 2_000 });
      await q.commit(changes, 5);
      await waitFor(() => delivered.length === 5, 20_000, 'the batch delivered after two throttled answers');
      expect(delivered).toEqual(changes.map((c) => c.key));
      // Three calls of the whole batch, each after the 200 ms asked for; no single-change call.
      expect(calls.map((c) => c.n)).toEqual([5, 5, 5]);
      expect(calls[1]!.at - calls[0]!.at).toBeGreaterThanOrEqual(180);
      expect(calls[2]!.at - calls[1]!.at).toBeGreaterThanOrEqual(180);
    });

    it('dead-letters a NeverError at once, after one attempt, naming the cause', async () => {
      const refused = makeChange('never');
      const fine = makeChange('never-other');
      const sink = new RecordingSink({
        fail: (c) => (c.key === refused.key ? new NeverError('bad request: no such field') : undefined),
      });
      const q = await open({ sink }, { attempts: 5 });
      await q.commit([refused, fine]);
      await waitFor(async () => (await q.counts('sink')).dead === 1, 20_000, 'one dead letter');
      await waitFor(() => sink.delivered.length === 1, 20_000, 'the other change delivered');
      // The outcome is reported once the dead letter's write is answered, which a count read on
      // another connection can see first.
      await waitFor(() => q.outcomes.has(refused.key), 5_000, 'the dead outcome reported');
      expect(sink.attempts.get(refused.key)).toBe(1);
      expect(q.outcomes.get(refused.key)).toEqual(['dead']);
      const [dead] = await q.driver.admin.listDead({ sink: 'sink' });
      expect(dead).toMatchObject({ sink: 'sink', key: refused.key, attempts: 1 });
      expect(dead!.change).toEqual(refused);
      expect(dead!.error).toMatch(/no such field/);
    });

    it('dead-letters after `attempts` failed attempts while other sinks and subjects carry on', async () => {
      const doomed = makeChange('doomed');
      const others = Array.from({ length: 5 }, (_, i) => makeChange(`carry-on-${i}`));
      const broken = new RecordingSink({
        fail: (c) => (c.key === doomed.key ? new RetryLaterError('still down') : undefined),
      });
      const healthy = new RecordingSink();
      const q = await open({ broken, healthy }, { attempts: 3 });
      await q.commit([doomed, ...others]);
      await waitFor(async () => (await q.counts('broken')).dead === 1, 20_000, 'the doomed change dead');
      await waitFor(
        () => healthy.delivered.length === 6 && broken.delivered.length === 5,
        20_000,
        'the rest',
      );
      await waitFor(
        () => q.outcomes.get(doomed.key)?.includes('dead') === true,
        5_000,
        'the dead outcome reported',
      );
      expect(broken.attempts.get(doomed.key)).toBe(3);
      expect(q.outcomes.get(doomed.key)?.filter((o) => o !== 'ok')).toEqual(['retry', 'retry', 'dead']);
      const [dead] = await q.driver.admin.listDead({});
      expect(dead).toMatchObject({ sink: 'broken', key: doomed.key, attempts: 3 });
      expect(dead!.error).toMatch(/still down/);
    });

    it('dlq list, retry and drop, filtered by sink and key; a retried change is delivered with fresh attempts', async () => {
      let healed = false;
      const changes = Array.from({ length: 4 }, (_, i) => makeChange(`dlq-${i}`));
      const broken = new RecordingSink({ fail: () => (healed ? undefined : new NeverError('refused')) });
      const other = new RecordingSink({ fail: () => (healed ? undefined : new NeverError('refused too')) });
      const q = await open({ broken, other });
      await q.commit(changes);
      await waitFor(
        async () => (await q.counts('broken')).dead === 4 && (await q.counts('other')).dead === 4,
        20_000,
        'eight dead letters',
      );
      const admin = q.driver.admin;
      expect(await admin.listDead({}, 100)).toHaveLength(8);
      expect(await admin.listDead({}, 3)).toHaveLength(3);
      expect((await admin.listDead({ sink: 'broken' })).map((d) => d.key).sort()).toEqual(
        changes.map((c) => c.key).sort(),
      );
      expect(await admin.listDead({ sink: 'other', key: changes[1]!.key })).toMatchObject([
        { sink: 'other', key: changes[1]!.key },
      ]);
      expect(await admin.listDead({ key: changes[1]!.key })).toHaveLength(2);
      expect(await admin.listDead({ sink: 'other', key: 'src:none' })).toEqual([]);
      await expect(admin.listDead({ sink: 'nope' })).rejects.toThrow(/unknown sink "nope"/);

      healed = true;
      expect(await admin.retryDead({ sink: 'broken', key: changes[0]!.key })).toBe(1);
      await waitFor(() => broken.delivered.length === 1, 20_000, 'the retried change delivered');
      expect(broken.keys()).toEqual([changes[0]!.key]);
      expect(await admin.dropDead({ sink: 'broken', key: changes[1]!.key })).toBe(1);
      expect(await admin.dropDead({ sink: 'other' })).toBe(4);
      expect((await admin.listDead({})).map((d) => d.key).sort()).toEqual(
        [changes[2]!.key, changes[3]!.key].sort(),
      );
      expect(await admin.retryDead({})).toBe(2);
      await waitFor(() => broken.delivered.length === 3, 20_000, 'both retried changes delivered');
      expect(other.delivered).toEqual([]);
      await waitFor(async () => drained(await q.counts('broken')), 10_000, 'broken drained');
      expect(await q.counts('broken')).toMatchObject({ dead: 0 });
      expect(await q.counts('other')).toMatchObject({ dead: 0 });
    });

    it('dlq retry handles more dead letters than one page (read a page at a time), each retried once', async () => {
      let healed = false;
      const changes = Array.from({ length: 620 }, (_, i) => makeChange(`many-${i}`));
      const sink = new RecordingSink({ fail: () => (healed ? undefined : new NeverError('refused')) });
      const q = await open({ sink });
      await q.commit(changes, 50);
      await waitFor(async () => (await q.counts('sink')).dead === 620, 60_000, '620 dead letters');
      healed = true;
      expect(await q.driver.admin.retryDead({})).toBe(620);
      await waitFor(() => sink.delivered.length === 620, 60_000, 'every retried change delivered');
      expect(new Set(sink.keys()).size).toBe(620);
      expect(await q.counts('sink')).toMatchObject({ dead: 0 });
    });

    it('gives a retried dead letter a fresh set of attempts', async () => {
      const change = makeChange('fresh');
      let failUntil = 2;
      const sink = new RecordingSink({
        fail: (_, attempt) => (attempt <= failUntil ? new RetryLaterError('down') : undefined),
      });
      const q = await open({ sink }, { attempts: 2 });
      await q.commit([change]);
      await waitFor(async () => (await q.counts('sink')).dead === 1, 20_000, 'a dead letter');
      // One more failure on the replay: still within the fresh two attempts.
      failUntil = 3;
      expect(await q.driver.admin.retryDead({})).toBe(1);
      await waitFor(() => sink.delivered.length === 1, 20_000, 'delivered after the retry');
      expect(sink.attempts.get(change.key)).toBe(4);
    });

    it('counts changes, not pages or slices: ten changes of one page are ten waiting', async () => {
      const changes = Array.from({ length: 10 }, (_, i) => makeChange(`one-page-${i}`));
      const q = await open({ sink: new RecordingSink() }, {}, false);
      await q.commit(changes, 10);
      expect(await q.counts('sink')).toEqual({ waiting: 10, active: 0, delayed: 0, failed: 0, dead: 0 });
      await q.driver.delivery!.start();
      await waitFor(async () => drained(await q.counts('sink')), 20_000, 'drained');
      expect(await q.counts('sink')).toEqual({ waiting: 0, active: 0, delayed: 0, failed: 0, dead: 0 });
    });

    it('delivers what the feed audit commits at the position the source holds already, once', async () => {
      const sink = new RecordingSink();
      const q = await open({ sink });
      const producer = q.driver.producer!;
      const at = { cursor: 10, seenAbove: [11] };
      const onTime = Array.from({ length: 9 }, (_, i) => makeChange(`audit-${i}`));
      await producer.commitPage({
        source: 'src',
        changes: onTime,
        ...at,
        from: { cursor: 0, seenAbove: [] },
      });
      // The audit re-read behind the cursor and found an event its rule had passed over.
      const late = makeChange('audit-late');
      expect(await producer.commitPage({ source: 'src', changes: [late], ...at, from: at })).toEqual({
        sink: 1,
      });
      await waitFor(() => sink.delivered.length >= 10, 20_000, 'all 10 delivered');
      await new Promise((r) => setTimeout(r, 200));
      expect(sink.keys().sort()).toEqual([...onTime, late].map((c) => c.key).sort());
    });

    it('counts queued, retrying and dead changes per sink', async () => {
      const queued = Array.from({ length: 5 }, (_, i) => makeChange(`count-${i}`));
      let failing = true;
      const sink = new RecordingSink({
        fail: (c) =>
          c.key === queued[0]!.key
            ? new NeverError('refused')
            : c.key === queued[1]!.key && failing
              ? new RetryLaterError('later')
              : undefined,
      });
      const idle = new RecordingSink();
      const q = await open({ sink, idle }, { attempts: 100, backoff_ms: 200, max_backoff_ms: 400 }, false);
      // One change per page: every driver counts it as one queued item (a change, or a slice of one).
      await q.commit(queued, 1);
      expect(await q.counts('sink')).toEqual({ waiting: 5, active: 0, delayed: 0, failed: 0, dead: 0 });
      await q.driver.delivery!.start();
      await waitFor(() => sink.delivered.length === 3 && idle.delivered.length === 5, 20_000, 'the rest');
      await waitFor(
        async () => {
          const c = await q.counts('sink');
          return c.dead === 1 && c.failed === 1;
        },
        20_000,
        'one dead, one retrying',
      );
      expect(await q.counts('idle')).toEqual({ waiting: 0, active: 0, delayed: 0, failed: 0, dead: 0 });
      failing = false;
      await waitFor(() => sink.delivered.length === 4, 20_000, 'the retrying change delivered');
      await waitFor(async () => drained(await q.counts('sink')), 10_000, 'sink drained');
      expect(await q.counts('sink')).toEqual({ waiting: 0, active: 0, delayed: 0, failed: 0, dead: 1 });
    });

    it('parks a sink at its bound without holding back another; its catch-up moves it, rejoins, reports lost ids', async () => {
      let down = true;
      const late = new RecordingSink({
        fail: () => (down ? new RetryLaterError('receiver down') : undefined),
      });
      const fast = new RecordingSink();
      const q = await open({ late, fast }, { max_backlog: 5, attempts: 10_000 });
      const producer = q.driver.producer!;
      // Event ids near 2^53: the ids passed and seen again must stay apart, digit for digit, and
      // the lost one be reported exactly (a Lua number keeps only 14 significant digits).
      const big = Number.MAX_SAFE_INTEGER - 14;
      const pages = Array.from({ length: 5 }, (_, p) =>
        Array.from({ length: 3 }, (_, i) => makeChange(`park-${p}-${i}`, big + 3 * p + i)),
      );
      // Pages 1-2 are queued for both (late: 6 waiting); page 3 parks `late` where page 3 began.
      for (const [i, page] of pages.slice(0, 4).entries()) {
        await q.commit(page);
        await waitFor(() => fast.delivered.length === 3 * (i + 1), 20_000, `fast got page ${i + 1}`);
      }
      const [lag, ...others] = await producer.laggingSinks('src');
      expect(others).toEqual([]);
      expect(lag).toMatchObject({
        sink: 'late',
        cursor: 2,
        seenAbove: [],
        reason: 'parked',
        pendingIds: 6,
        backlog: 6,
      });
      // A catch-up page read for another generation (a replay moved the sink meanwhile) is refused.
      const base = {
        source: 'src',
        sink: 'late',
        reason: lag!.reason,
        since: lag!.since,
        seenAbove: [],
        eventAt: 0,
        // The source's cursor: the shared stream has passed pages 1-4.
        shared: { cursor: 4, seenAbove: [] },
      };
      await expect(
        producer.commitCatchUp({
          ...base,
          generation: lag!.generation + 1,
          changes: pages[2]!,
          cursor: 3,
          eventIds: [],
          join: false,
          from: { cursor: lag!.cursor, seenAbove: [] },
        }),
      ).rejects.toThrow(/not committed/);
      const third = await producer.commitCatchUp({
        ...base,
        generation: lag!.generation,
        changes: pages[2]!,
        cursor: 3,
        eventIds: pages[2]!.map((c) => c.event_id),
        join: false,
        from: { cursor: lag!.cursor, seenAbove: [] },
      });
      expect(third).toEqual({ queued: 3, lost: [] });
      expect((await producer.laggingSinks('src'))[0]).toMatchObject({ cursor: 3, pendingIds: 3, backlog: 9 });
      // Page 4 comes back without its first event (the feed no longer has it): reported lost on rejoining.
      const fourth = await producer.commitCatchUp({
        ...base,
        generation: lag!.generation,
        changes: pages[3]!.slice(1),
        cursor: 4,
        eventIds: pages[3]!.slice(1).map((c) => c.event_id),
        join: true,
        from: { cursor: 3, seenAbove: [] },
      });
      expect(fourth).toEqual({ queued: 2, lost: [pages[3]![0]!.event_id] });
      expect(await producer.laggingSinks('src')).toEqual([]);
      expect(await q.driver.positions.lost()).toMatchObject([
        { source: 'src', sink: 'late', count: 1, ids: [pages[3]![0]!.event_id] },
      ]);
      // Back on the shared stream once it has drained (with 9 waiting it would park again): page 5
      // is queued for both.
      down = false;
      await waitFor(() => late.delivered.length === 11, 30_000, 'late drained what it had');
      await q.commit(pages[4]!);
      const expected = [...pages[0]!, ...pages[1]!, ...pages[2]!, ...pages[3]!.slice(1), ...pages[4]!].map(
        (c) => c.key,
      );
      await waitFor(() => late.delivered.length >= expected.length, 30_000, 'late got page 5');
      await sleep(200);
      expect(late.keys().sort()).toEqual(expected.sort());
      expect(fast.keys()).toHaveLength(15);
    });

    it('cursor set/reset: a rewind takes the sinks lagging past it back; a skip forward leaves them', async () => {
      const config = harness.config(tempDir(), ['late', 'fast'], { max_backlog: 2 });
      const openMode = (mode: 'run' | 'ops', sinks: Record<string, Sink>) =>
        openQueueDriver({
          config,
          mode,
          sinks: Object.entries(sinks).map(([n, sink]) => ({ name: n, sink })),
          events: new PipelineEvents(),
          logger: pino({ level: 'silent' }),
        });
      const run = await openMode('run', { late: new RecordingSink(), fast: new RecordingSink() });
      const lease = await run.leases!.acquire('src', new AbortController().signal, () => undefined);
      // No delivery: both sinks fill up and are parked where page 2 began (cursor 10).
      for (const [i, cursor] of [10, 20, 30].entries())
        await run.producer!.commitPage({
          source: 'src',
          changes: [makeChange(`cs-${i}-a`), makeChange(`cs-${i}-b`)],
          cursor,
          seenAbove: [],
        });
      expect((await run.positions.lagging()).map((l) => [l.sink, l.cursor]).sort()).toEqual([
        ['fast', 10],
        ['late', 10],
      ]);
      await lease?.release();
      await run.close();

      const ops = await openMode('ops', {});
      const move = async (target: number) => {
        const held = await ops.leases!.hold('src');
        if ('holder' in held) throw new Error(`held by ${held.holder}`);
        await held.save(target, []);
        await held.release();
        return (await ops.positions.lagging()).map((l) => [l.sink, l.cursor]).sort();
      };
      // A rewind to 25 leaves them (behind it); to 5 takes them back to 5; a skip to 40 leaves them
      // at 5: they never received 5..25, and nothing is skipped silently for a sink.
      expect(await move(25)).toEqual([
        ['fast', 10],
        ['late', 10],
      ]);
      expect(await move(5)).toEqual([
        ['fast', 5],
        ['late', 5],
      ]);
      expect(await move(40)).toEqual([
        ['fast', 5],
        ['late', 5],
      ]);
      await ops.close();
    });

    it('loses nothing when the process owning the driver is killed with SIGKILL mid-delivery', async () => {
      const dir = tempDir();
      const configPath = join(dir, 'config.json');
      const out = join(dir, 'out.keys');
      const changesPath = join(dir, 'changes.json');
      writeFileSync(configPath, JSON.stringify(harness.config(dir, ['out'], { concurrency: 2, shards: 2 })));
      const changes = Array.from({ length: 150 }, (_, i) => makeChange(`kill-${i % 10}`));
      writeFileSync(changesPath, JSON.stringify(changes));
      const delivered = (): string[] =>
        existsSync(out) ? readFileSync(out, 'utf8').split('\n').filter(Boolean) : [];
      const spawnChild = (...args: string[]): ChildProcess => {
        const child = spawn(process.execPath, [CHILD, configPath, out, ...args], {
          stdio: ['ignore', 'ignore', 'inherit'],
        });
        children.push(child);
        return child;
      };
      const exited = (child: ChildProcess): Promise<unknown> =>
        child.exitCode !== null || child.signalCode !== null
          ? Promise.resolve()
          : new Promise((r) => child.once('exit', r));

      const first = spawnChild(changesPath);
      await waitFor(() => delivered().length >= 30, 30_000, 'the first process delivering');
      first.kill('SIGKILL');
      await exited(first);
      expect(new Set(delivered()).size).toBeLessThan(150);

      const second = spawnChild();
      await waitFor(
        () => new Set(delivered()).size === 150,
        harness.recoveryMs + 30_000,
        'every change delivered after the restart',
      );
      expect([...new Set(delivered())].sort()).toEqual(changes.map((c) => c.key).sort());
      second.kill('SIGTERM');
      expect(await Promise.race([exited(second).then(() => true), sleep(10_000).then(() => false)])).toBe(
        true,
      );
    }, 120_000);
  });
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
