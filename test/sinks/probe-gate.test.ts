// The probe gate's state machine on a clock the test moves by hand: a failing sink gets one probe
// per backoff step (never sooner than its Retry-After, never more than two a second), every other
// call is turned away without reaching it, and the first answer opens the gate again.
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { NeverError, RetryLaterError, SinkProbingError } from '../../src/core/errors.js';
import { PipelineEvents, type PipelineEventMap } from '../../src/core/events.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { decideAfterFailure } from '../../src/queue/delivery-policy.js';
import { reportFailed } from '../../src/queue/delivery-report.js';
import {
  FAILURES_TO_PROBE,
  MAX_PROBE_SPACING_MS,
  MIN_PROBE_SPACING_MS,
  withProbeGate,
  type GatedSink,
} from '../../src/sinks/probe-gate.js';
import type { Sink } from '../../src/sinks/sink.js';
import { parseSamples, sampleValue } from '../observability/prom-text.js';
import { makeChange } from './support/make-change.js';

const QUEUE = { backoff_ms: 1000, max_backoff_ms: 30_000, attempts: 5 };

/** A sink whose every call waits until the test settles it; `calls` counts what reached it. */
function controlledSink(batch = false) {
  const pending: { resolve: () => void; reject: (err: unknown) => void }[] = [];
  let calls = 0;
  const call = (): Promise<void> => {
    calls++;
    return new Promise<void>((resolve, reject) => pending.push({ resolve, reject }));
  };
  const sink: Sink = { deliver: call, close: async () => undefined };
  if (batch) sink.deliverBatch = call;
  return {
    sink,
    calls: () => calls,
    inFlight: () => pending.length,
    succeed: () => pending.shift()!.resolve(),
    fail: (err: unknown) => pending.shift()!.reject(err),
  };
}

function harness(opts: { batch?: boolean; random?: number; queue?: typeof QUEUE } = {}) {
  let t = 1_000_000;
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s)) });
  const events = new PipelineEvents();
  const seen: { name: keyof PipelineEventMap; payload: unknown }[] = [];
  events.on('sink:failing', (p) => seen.push({ name: 'sink:failing', payload: p }));
  events.on('sink:probe', (p) => seen.push({ name: 'sink:probe', payload: p }));
  const inner = controlledSink(opts.batch);
  const gate = withProbeGate(inner.sink, 'hook', opts.queue ?? QUEUE, {
    logger,
    events,
    now: () => t,
    random: () => opts.random ?? 1,
  });
  return {
    gate,
    inner,
    lines,
    events,
    seen,
    advance: (ms: number) => (t += ms),
  };
}

/** Starts a call and reports how it settled, without an unhandled rejection in between. */
function start(gate: GatedSink) {
  const outcome: { settled: boolean; err?: unknown } = { settled: false };
  const done = gate.deliver(makeChange()).then(
    () => Object.assign(outcome, { settled: true }),
    (err: unknown) => Object.assign(outcome, { settled: true, err }),
  );
  return { outcome, done };
}

const flush = () => new Promise((r) => setImmediate(r));

/** The failures in a row that make the gate turn the sink failing, the last one being `err`. */
async function breakGate(h: ReturnType<typeof harness>, err: unknown): Promise<void> {
  for (let i = 0; i < FAILURES_TO_PROBE; i++) {
    const call = start(h.gate);
    h.inner.fail(i === FAILURES_TO_PROBE - 1 ? err : unavailable());
    await call.done;
  }
}
const unavailable = (retryAfterMs?: number) => new RetryLaterError('HTTP 503', retryAfterMs);

describe('probe gate', () => {
  it('passes calls straight through while healthy, as many at once as the queue sends', async () => {
    const h = harness();
    const calls = Array.from({ length: 8 }, () => start(h.gate));
    expect(h.inner.calls()).toBe(8);
    for (let i = 0; i < 8; i++) h.inner.succeed();
    await Promise.all(calls.map((c) => c.done));
    expect(calls.every((c) => c.outcome.err === undefined)).toBe(true);
    expect(h.gate.state()).toBe('healthy');
    expect(h.gate.readyInMs()).toBe(0);
    expect(h.seen).toEqual([]);
  });

  it('after failures in a row turns calls away without calling the sink, as a wait that spends no attempt', async () => {
    const h = harness({ random: 0 });
    await breakGate(h, unavailable(1000));
    expect(h.gate.state()).toBe('failing');
    // backoff step 0 with random 0 is 500 ms; Retry-After asks for 1000.
    expect(h.gate.readyInMs()).toBe(1000);

    h.advance(300);
    const held = start(h.gate);
    await held.done;
    expect(held.outcome.err).toBeInstanceOf(SinkProbingError);
    expect(held.outcome.err).toBeInstanceOf(RetryLaterError);
    expect(h.inner.calls()).toBe(FAILURES_TO_PROBE);
    expect((held.outcome.err as SinkProbingError).retryAfterMs).toBe(700);
    expect((held.outcome.err as Error).message).toMatch(/sink "hook" is failing \(HTTP 503\)/);
    expect(decideAfterFailure(held.outcome.err, 3, QUEUE)).toEqual({
      outcome: 'retry',
      attempts: 3,
      delayMs: 700,
    });

    // Just before the probe is due: still held, but for at least 100 ms.
    h.advance(699);
    const late = start(h.gate);
    await late.done;
    expect((late.outcome.err as SinkProbingError).retryAfterMs).toBe(100);
    expect(h.inner.calls()).toBe(FAILURES_TO_PROBE);
    expect(h.seen).toEqual([{ name: 'sink:failing', payload: { sink: 'hook', failing: true } }]);
  });

  it('probes a long outage at least once a minute, however large max_backoff_ms is', async () => {
    const h = harness({ random: 1, queue: { backoff_ms: 1000, max_backoff_ms: 300_000, attempts: 5 } });
    await breakGate(h, unavailable());
    const spacings: number[] = [];
    for (let probe = 0; probe < 12; probe++) {
      const wait = h.gate.readyInMs();
      spacings.push(wait);
      h.advance(wait);
      const call = start(h.gate);
      h.inner.fail(unavailable());
      await call.done;
    }
    expect(Math.max(...spacings)).toBe(MAX_PROBE_SPACING_MS);
    expect(spacings.at(-1)).toBe(MAX_PROBE_SPACING_MS);
    // A receiver that asks for longer (Retry-After) still gets it.
    h.advance(h.gate.readyInMs());
    const probe = start(h.gate);
    h.inner.fail(unavailable(120_000));
    await probe.done;
    expect(h.gate.readyInMs()).toBe(120_000);
  });

  it('lets exactly one probe through at a time, and opens at once when it succeeds', async () => {
    const h = harness();
    await breakGate(h, unavailable());
    h.advance(h.gate.readyInMs());

    const probe = start(h.gate);
    const others = Array.from({ length: 5 }, () => start(h.gate));
    await Promise.all(others.map((o) => o.done));
    expect(h.inner.calls()).toBe(FAILURES_TO_PROBE + 1);
    for (const o of others) {
      expect(o.outcome.err).toBeInstanceOf(SinkProbingError);
      // Not until the next probe: back soon after this one succeeds.
      expect((o.outcome.err as SinkProbingError).retryAfterMs).toBe(MIN_PROBE_SPACING_MS);
    }
    expect(probe.outcome.settled).toBe(false);

    h.advance(250);
    h.inner.succeed();
    await probe.done;
    expect(probe.outcome.err).toBeUndefined();
    expect(h.gate.state()).toBe('healthy');
    const drained = Array.from({ length: 6 }, () => start(h.gate));
    expect(h.inner.calls()).toBe(FAILURES_TO_PROBE + 7);
    for (let i = 0; i < 6; i++) h.inner.succeed();
    await Promise.all(drained.map((d) => d.done));
    expect(h.seen).toEqual([
      { name: 'sink:failing', payload: { sink: 'hook', failing: true } },
      { name: 'sink:probe', payload: { sink: 'hook', ok: true } },
      { name: 'sink:failing', payload: { sink: 'hook', failing: false } },
    ]);
    // One line when it started failing, one when it answered again: none per call turned away.
    const gateLines = h.lines.filter((l) => l.sink === 'hook');
    expect(gateLines.map((l) => l.msg)).toEqual([
      'sink failing: its deliveries wait, one probe at a time until it answers',
      'sink answers again; delivering at full speed',
    ]);
    expect(gateLines[0]).toMatchObject({ err: 'HTTP 503', next_probe_in_ms: 1000 });
    expect(gateLines[1]).toMatchObject({ probes: 1, failing_ms: 1250 });
  });

  it('spaces failed probes by the growing backoff step, never below 500 ms, never before Retry-After', async () => {
    const h = harness({ random: 1, queue: { backoff_ms: 100, max_backoff_ms: 2000, attempts: 5 } });
    await breakGate(h, unavailable());
    const spacings = [h.gate.readyInMs()];
    for (let k = 0; k < 7; k++) {
      h.advance(h.gate.readyInMs());
      const probe = start(h.gate);
      // Every probe asks for 300 ms; the floor and then the backoff step win.
      h.inner.fail(unavailable(300));
      await probe.done;
      expect(probe.outcome.err).toBeInstanceOf(RetryLaterError);
      expect(probe.outcome.err).not.toBeInstanceOf(SinkProbingError);
      spacings.push(h.gate.readyInMs());
    }
    // 100 · 2^k capped at 2000 (random 1: the full step), floor 500.
    expect(spacings).toEqual([500, 500, 500, 800, 1600, 2000, 2000, 2000]);
    expect(h.inner.calls()).toBe(FAILURES_TO_PROBE + 7);

    expect(h.seen.filter((e) => e.name === 'sink:probe')).toEqual(
      Array.from({ length: 7 }, () => ({ name: 'sink:probe', payload: { sink: 'hook', ok: false } })),
    );
  });

  it('waits as long as a Retry-After longer than the step asks, up to max_backoff_ms', async () => {
    const h = harness({ random: 1, queue: { backoff_ms: 100, max_backoff_ms: 5000, attempts: 5 } });
    await breakGate(h, unavailable(1800));
    expect(h.gate.readyInMs()).toBe(1800);
    h.advance(1799);
    const held = start(h.gate);
    await held.done;
    expect(held.outcome.err).toBeInstanceOf(SinkProbingError);
    h.advance(1);
    const probe = start(h.gate);
    h.inner.fail(unavailable(60 * 60 * 1000));
    await probe.done;
    expect(h.gate.readyInMs()).toBe(5000);
    expect(h.inner.calls()).toBe(FAILURES_TO_PROBE + 1);
  });

  it('jitters each step between half and all of it', async () => {
    for (const [random, expected] of [
      [0, 4000],
      [0.5, 6000],
      [1, 8000],
    ] as const) {
      const h = harness({ random, queue: { backoff_ms: 1000, max_backoff_ms: 30_000, attempts: 5 } });
      await breakGate(h, unavailable());
      for (let k = 0; k < 3; k++) {
        h.advance(h.gate.readyInMs());
        const probe = start(h.gate);
        h.inner.fail(new Error('ECONNREFUSED'));
        await probe.done;
      }
      expect(h.gate.readyInMs(), `random ${random}`).toBe(expected);
    }
  });

  it('counts a NeverError as an answer: it never closes the gate and a probe that gets one opens it', async () => {
    const h = harness();
    const refused = start(h.gate);
    h.inner.fail(new NeverError('HTTP 400'));
    await refused.done;
    expect(refused.outcome.err).toBeInstanceOf(NeverError);
    expect(h.gate.state()).toBe('healthy');

    await breakGate(h, unavailable());
    h.advance(h.gate.readyInMs());
    const probe = start(h.gate);
    h.inner.fail(new NeverError('HTTP 422'));
    await probe.done;
    expect(probe.outcome.err).toBeInstanceOf(NeverError);
    expect(h.gate.state()).toBe('healthy');
    expect(h.seen.filter((e) => e.name === 'sink:probe')).toEqual([
      { name: 'sink:probe', payload: { sink: 'hook', ok: true } },
    ]);
  });

  it('stays open while failures alternate with answers', async () => {
    const h = harness();
    for (let round = 0; round < 5; round++) {
      for (let i = 0; i < FAILURES_TO_PROBE - 1; i++) {
        const call = start(h.gate);
        h.inner.fail(unavailable(1000));
        await call.done;
      }
      const ok = start(h.gate);
      h.inner.succeed();
      await ok.done;
    }
    expect(h.gate.state()).toBe('healthy');
    expect(h.inner.calls()).toBe(5 * FAILURES_TO_PROBE);
    expect(h.seen).toEqual([]);
  });

  it('opens when a call sent before the failures succeeds; a late failure only lengthens the wait it asks for', async () => {
    const h = harness({ random: 0 });
    const calls = Array.from({ length: FAILURES_TO_PROBE + 2 }, () => start(h.gate));
    for (let i = 0; i < FAILURES_TO_PROBE; i++) {
      h.inner.fail(unavailable());
      await calls[i]!.done;
    }
    expect(h.gate.state()).toBe('failing');
    expect(h.gate.readyInMs()).toBe(500);
    // An earlier call fails later, asking for 5 s: the next probe waits for it; no step is spent.
    h.advance(100);
    h.inner.fail(unavailable(5000));
    await calls[FAILURES_TO_PROBE]!.done;
    expect(h.gate.readyInMs()).toBe(5000);
    // The last one was answered: the sink is reachable again.
    h.inner.succeed();
    await calls[FAILURES_TO_PROBE + 1]!.done;
    expect(h.gate.state()).toBe('healthy');
    expect(h.seen.map((e) => e.name)).toEqual(['sink:failing', 'sink:failing']);
  });

  it('a probe that fails after another answer opened the gate counts as one failure, from scratch', async () => {
    const h = harness({ random: 0 });
    const before = Array.from({ length: FAILURES_TO_PROBE + 1 }, () => start(h.gate));
    for (let i = 0; i < FAILURES_TO_PROBE; i++) {
      h.inner.fail(unavailable());
      await before[i]!.done;
    }
    h.advance(h.gate.readyInMs());
    const probe = start(h.gate);
    h.inner.succeed(); // the call sent before the failures
    await before[FAILURES_TO_PROBE]!.done;
    expect(h.gate.state()).toBe('healthy');
    h.inner.fail(unavailable());
    await probe.done;
    expect(h.gate.state()).toBe('healthy');
    // It was the first of a new run of failures.
    for (let i = 1; i < FAILURES_TO_PROBE; i++) {
      const call = start(h.gate);
      h.inner.fail(unavailable());
      await call.done;
    }
    expect(h.gate.state()).toBe('failing');
    expect(h.gate.readyInMs()).toBe(500);
  });

  it('gates deliverBatch with the same state, and offers it only when the sink does', async () => {
    expect(harness().gate.deliverBatch).toBeUndefined();
    const h = harness({ batch: true });
    for (let i = 0; i < FAILURES_TO_PROBE; i++) {
      const batch = h.gate.deliverBatch!([makeChange(), makeChange()]).catch((e: unknown) => e);
      h.inner.fail(unavailable());
      await batch;
    }
    const held = await h.gate.deliverBatch!([makeChange()]).catch((e: unknown) => e);
    expect(held).toBeInstanceOf(SinkProbingError);
    const single = start(h.gate);
    await single.done;
    expect(single.outcome.err).toBeInstanceOf(SinkProbingError);
    expect(h.inner.calls()).toBe(FAILURES_TO_PROBE);
  });

  it('sends a sink that never recovers at most two calls a second, however hard the queue pushes', async () => {
    // Retry-After 0 and a 1 ms backoff: the 500 ms floor alone holds the rate down.
    const h = harness({ random: 0, queue: { backoff_ms: 1, max_backoff_ms: 1, attempts: 5 } });
    const sent: number[] = [];
    let now = 0;
    for (let tick = 0; tick < 6000; tick++) {
      // Every 5 ms, 20 callers (lanes, shards) try; each call that reaches the sink fails at once.
      const before = h.inner.calls();
      const calls = Array.from({ length: 20 }, () => start(h.gate));
      for (let i = before; i < h.inner.calls(); i++) sent.push(now);
      while (h.inner.inFlight() > 0) h.inner.fail(unavailable(0));
      await Promise.all(calls.map((c) => c.done));
      h.advance(5);
      now += 5;
    }
    // 30 s: the first burst of 20, then a probe every 500 ms.
    expect(sent.filter((t) => t === 0)).toHaveLength(20);
    const later = sent.filter((t) => t > 0);
    expect(later.length).toBeLessThanOrEqual(60);
    expect(later.length).toBeGreaterThanOrEqual(55);
    for (const t of later) expect(later.filter((u) => u >= t && u < t + 1000).length).toBeLessThanOrEqual(2);
  });

  it('feeds feedsync_sink_probes_total and feedsync_sink_failing; turned-away calls are no delivery attempts', async () => {
    const h = harness();
    const metrics = createMetrics({ events: h.events, sources: [], sinks: ['hook'], version: 'x' });
    const value = async (name: string, labels: Record<string, string>) =>
      sampleValue(parseSamples(await metrics.registry.metrics()), name, labels);
    expect(await value('feedsync_sink_failing', { sink: 'hook' })).toBe(0);
    expect(await value('feedsync_sink_probes_total', { sink: 'hook', outcome: 'failed' })).toBe(0);

    await breakGate(h, unavailable());
    expect(await value('feedsync_sink_failing', { sink: 'hook' })).toBe(1);
    const held = start(h.gate);
    await held.done;
    const report = { events: h.events, logger: pino({ level: 'silent' }), sink: 'hook' };
    reportFailed(report, 'k', decideAfterFailure(held.outcome.err, 0, QUEUE), held.outcome.err, 0);
    expect(await value('feedsync_deliveries_total', { sink: 'hook', outcome: 'retry' })).toBe(0);

    h.advance(h.gate.readyInMs());
    let probe = start(h.gate);
    h.inner.fail(unavailable());
    await probe.done;
    h.advance(h.gate.readyInMs());
    probe = start(h.gate);
    h.inner.succeed();
    await probe.done;
    expect(await value('feedsync_sink_probes_total', { sink: 'hook', outcome: 'failed' })).toBe(1);
    expect(await value('feedsync_sink_probes_total', { sink: 'hook', outcome: 'ok' })).toBe(1);
    expect(await value('feedsync_sink_failing', { sink: 'hook' })).toBe(0);
    metrics.close();
    await flush();
  });
});
