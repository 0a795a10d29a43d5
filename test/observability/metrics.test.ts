import { afterEach, describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/observability/metrics.js';
import { PipelineEvents } from '../../src/core/events.js';
import type { SinkJobCounts } from '../../src/queue/queue.js';
import { metricFamilies, parseSamples, sampleValue, type Sample } from './prom-text.js';
import { promtool } from './promtool.js';
import { startStack } from './stack.js';

type Stack = Awaited<ReturnType<typeof startStack>>;
let stack: Stack | undefined;
afterEach(async () => {
  await stack?.close();
  stack = undefined;
});

function counts(waiting: number, dead: number): SinkJobCounts {
  return { waiting, active: 1, delayed: 2, failed: 3, dead };
}

async function scrape(s: Stack): Promise<{ text: string; samples: Sample[] }> {
  const res = await s.get('/metrics');
  expect(res.status).toBe(200);
  expect(res.contentType).toMatch(/^text\/plain; version=0\.0\.4/);
  return { text: res.body, samples: parseSamples(res.body) };
}

function emitScript(s: Stack): void {
  const { events } = s;
  for (let i = 0; i < 3; i++)
    events.emit('http:response', { source: 'scheduling', kind: 'feed', code: '200' });
  for (let i = 0; i < 2; i++)
    events.emit('http:response', { source: 'scheduling', kind: 'subject', code: '404' });
  events.emit('http:response', { source: 'workflow', kind: 'feed', code: '503' });

  events.emit('poll:finished', {
    source: 'scheduling',
    ok: true,
    durationSeconds: 0.2,
    pageSize: 50,
    behind: true,
  });
  events.emit('page:committed', {
    source: 'scheduling',
    cursor: 123459,
    eventTypes: ['title_updated', 'title_updated', 'scheduling_created'],
    lastEventTimestamp: 1795000000,
    enqueued: { file: 3, hook: 2 },
    gone: 1,
  });
  events.emit('poll:finished', {
    source: 'scheduling',
    ok: true,
    durationSeconds: 0.03,
    pageSize: 1,
    behind: false,
  });
  events.emit('page:committed', {
    source: 'scheduling',
    cursor: 123460,
    eventTypes: ['title_deleted'],
    lastEventTimestamp: 1795000100,
    enqueued: { file: 1, hook: 1 },
    gone: 1,
  });
  for (let i = 0; i < 2; i++) {
    events.emit('poll:finished', {
      source: 'workflow',
      ok: false,
      durationSeconds: 1.5,
      pageSize: 0,
      behind: false,
      error: new Error('HTTP 503 on GET http://u:pw@127.0.0.1/workflow/api/events'),
    });
  }
  for (let i = 0; i < 4; i++) {
    events.emit('delivery:finished', {
      sink: 'file',
      outcome: 'ok',
      durationSeconds: 0.002,
      endToEndSeconds: 0.7,
      key: `scheduling:${123457 + i}`,
    });
  }
  events.emit('delivery:finished', {
    sink: 'hook',
    outcome: 'ok',
    durationSeconds: 0.3,
    endToEndSeconds: 45,
    key: 'scheduling:123457',
  });
  for (let i = 0; i < 2; i++) {
    events.emit('delivery:finished', {
      sink: 'hook',
      outcome: 'retry',
      durationSeconds: 2,
      key: 'scheduling:123458',
    });
  }
  events.emit('delivery:finished', {
    sink: 'hook',
    outcome: 'dead',
    durationSeconds: 2,
    key: 'scheduling:123458',
  });
}

describe('metrics over /metrics', () => {
  it('counts a scripted sequence of pipeline events exactly', async () => {
    stack = await startStack();
    const before = Date.now() / 1000;
    emitScript(stack);
    const { samples } = await scrape(stack);
    const v = (name: string, labels: Record<string, string> = {}) => sampleValue(samples, name, labels);

    expect(v('feedsync_build_info', { version: '1.2.3-test' })).toBe(1);
    expect(v('feedsync_http_requests_total', { source: 'scheduling', kind: 'feed', code: '200' })).toBe(3);
    expect(v('feedsync_http_requests_total', { source: 'scheduling', kind: 'subject', code: '404' })).toBe(2);
    expect(v('feedsync_http_requests_total', { source: 'workflow', kind: 'feed', code: '503' })).toBe(1);

    expect(v('feedsync_events_total', { source: 'scheduling', event_type: 'title_updated' })).toBe(2);
    expect(v('feedsync_events_total', { source: 'scheduling', event_type: 'scheduling_created' })).toBe(1);
    expect(v('feedsync_events_total', { source: 'scheduling', event_type: 'title_deleted' })).toBe(1);
    expect(v('feedsync_subject_gone_total', { source: 'scheduling' })).toBe(2);
    expect(v('feedsync_subject_gone_total', { source: 'workflow' })).toBe(0);
    expect(v('feedsync_cursor_event_id', { source: 'scheduling' })).toBe(123460);
    expect(v('feedsync_last_event_timestamp_seconds', { source: 'scheduling' })).toBe(1795000100);
    expect(v('feedsync_changes_enqueued_total', { source: 'scheduling', sink: 'file' })).toBe(4);
    expect(v('feedsync_changes_enqueued_total', { source: 'scheduling', sink: 'hook' })).toBe(3);
    expect(v('feedsync_changes_enqueued_total', { source: 'workflow', sink: 'hook' })).toBe(0);

    expect(v('feedsync_polls_total', { source: 'scheduling', outcome: 'ok' })).toBe(2);
    expect(v('feedsync_polls_total', { source: 'scheduling', outcome: 'error' })).toBe(0);
    expect(v('feedsync_polls_total', { source: 'workflow', outcome: 'error' })).toBe(2);
    expect(v('feedsync_polls_total', { source: 'workflow', outcome: 'ok' })).toBe(0);
    expect(v('feedsync_poll_duration_seconds_count', { source: 'scheduling' })).toBe(2);
    expect(v('feedsync_poll_duration_seconds_sum', { source: 'scheduling' })).toBeCloseTo(0.23, 9);
    expect(v('feedsync_poll_duration_seconds_bucket', { source: 'scheduling', le: '0.05' })).toBe(1);
    expect(v('feedsync_poll_duration_seconds_bucket', { source: 'workflow', le: '1' })).toBe(0);
    expect(v('feedsync_poll_duration_seconds_bucket', { source: 'workflow', le: '2.5' })).toBe(2);
    expect(v('feedsync_source_behind', { source: 'scheduling' })).toBe(0);
    const lastOk = v('feedsync_last_successful_poll_timestamp_seconds', { source: 'scheduling' });
    expect(lastOk).toBeGreaterThanOrEqual(Math.floor(before));
    expect(lastOk).toBeLessThanOrEqual(Date.now() / 1000);
    // Never succeeded: the gauge must not pretend it did.
    expect(
      samples.some(
        (s) => s.name === 'feedsync_last_successful_poll_timestamp_seconds' && s.labels.source === 'workflow',
      ),
    ).toBe(false);

    expect(v('feedsync_deliveries_total', { sink: 'file', outcome: 'ok' })).toBe(4);
    expect(v('feedsync_deliveries_total', { sink: 'file', outcome: 'retry' })).toBe(0);
    expect(v('feedsync_deliveries_total', { sink: 'file', outcome: 'dead' })).toBe(0);
    expect(v('feedsync_deliveries_total', { sink: 'hook', outcome: 'ok' })).toBe(1);
    expect(v('feedsync_deliveries_total', { sink: 'hook', outcome: 'retry' })).toBe(2);
    expect(v('feedsync_deliveries_total', { sink: 'hook', outcome: 'dead' })).toBe(1);
    expect(v('feedsync_delivery_duration_seconds_count', { sink: 'hook' })).toBe(4);
    expect(v('feedsync_delivery_duration_seconds_bucket', { sink: 'file', le: '0.0025' })).toBe(4);
    expect(v('feedsync_end_to_end_seconds_count', { sink: 'file' })).toBe(4);
    expect(v('feedsync_end_to_end_seconds_count', { sink: 'hook' })).toBe(1);
    expect(v('feedsync_end_to_end_seconds_bucket', { sink: 'hook', le: '30' })).toBe(0);
    expect(v('feedsync_end_to_end_seconds_bucket', { sink: 'hook', le: '60' })).toBe(1);

    // Low cardinality: no label carries an id, a key or a URL.
    for (const s of samples.filter((x) => x.name.startsWith('feedsync_'))) {
      for (const value of Object.values(s.labels)) {
        expect(value, `${s.name} ${JSON.stringify(s.labels)}`).not.toMatch(/:\/\/|\d{5,}|scheduling:\d/);
      }
    }
  });

  it('shows the behind flag of the latest successful poll', async () => {
    stack = await startStack();
    stack.events.emit('poll:finished', {
      source: 'workflow',
      ok: true,
      durationSeconds: 0.1,
      pageSize: 50,
      behind: true,
    });
    let { samples } = await scrape(stack);
    expect(sampleValue(samples, 'feedsync_source_behind', { source: 'workflow' })).toBe(1);
    expect(sampleValue(samples, 'feedsync_source_behind', { source: 'scheduling' })).toBe(0);
    // Configured label sets exist before anything happened, so rate() sees the first increment.
    expect(sampleValue(samples, 'feedsync_poll_duration_seconds_count', { source: 'scheduling' })).toBe(0);
    expect(sampleValue(samples, 'feedsync_end_to_end_seconds_count', { sink: 'file' })).toBe(0);
    expect(sampleValue(samples, 'feedsync_delivery_duration_seconds_count', { sink: 'hook' })).toBe(0);
    stack.events.emit('poll:finished', {
      source: 'workflow',
      ok: true,
      durationSeconds: 0.1,
      pageSize: 3,
      behind: false,
    });
    ({ samples } = await scrape(stack));
    expect(sampleValue(samples, 'feedsync_source_behind', { source: 'workflow' })).toBe(0);
  });

  it('reads queue gauges at scrape time, caches them for a second and keeps the last values on error', async () => {
    let calls = 0;
    let fail = false;
    stack = await startStack({
      queueCounts: async () => {
        calls++;
        if (fail) throw new Error('connect ECONNREFUSED redis://:hunter2@127.0.0.1:6379');
        return { file: counts(5, 0), hook: counts(calls * 10, 7) };
      },
    });
    let { samples } = await scrape(stack);
    expect(calls).toBe(1);
    expect(sampleValue(samples, 'feedsync_queue_jobs', { sink: 'file', state: 'waiting' })).toBe(5);
    expect(sampleValue(samples, 'feedsync_queue_jobs', { sink: 'hook', state: 'waiting' })).toBe(10);
    expect(sampleValue(samples, 'feedsync_queue_jobs', { sink: 'hook', state: 'active' })).toBe(1);
    expect(sampleValue(samples, 'feedsync_queue_jobs', { sink: 'hook', state: 'delayed' })).toBe(2);
    expect(sampleValue(samples, 'feedsync_queue_jobs', { sink: 'hook', state: 'failed' })).toBe(3);
    expect(sampleValue(samples, 'feedsync_dead_letters', { sink: 'hook' })).toBe(7);
    expect(sampleValue(samples, 'feedsync_dead_letters', { sink: 'file' })).toBe(0);

    await scrape(stack);
    expect(calls).toBe(1);

    fail = true;
    await new Promise((r) => setTimeout(r, 1100));
    ({ samples } = await scrape(stack));
    expect(calls).toBe(2);
    expect(sampleValue(samples, 'feedsync_queue_jobs', { sink: 'hook', state: 'waiting' })).toBe(10);
    expect(sampleValue(samples, 'feedsync_dead_letters', { sink: 'hook' })).toBe(7);

    fail = false;
    await new Promise((r) => setTimeout(r, 1100));
    ({ samples } = await scrape(stack));
    expect(calls).toBe(3);
    expect(sampleValue(samples, 'feedsync_queue_jobs', { sink: 'hook', state: 'waiting' })).toBe(30);
  });

  it('stops counting after close()', async () => {
    const events = new PipelineEvents();
    const metrics = createMetrics({ events, sources: ['a'], sinks: ['s'], version: 'x' });
    events.emit('poll:finished', { source: 'a', ok: true, durationSeconds: 0.1, pageSize: 1, behind: false });
    metrics.close();
    events.emit('poll:finished', { source: 'a', ok: true, durationSeconds: 0.1, pageSize: 1, behind: false });
    const samples = parseSamples(await metrics.registry.metrics());
    expect(sampleValue(samples, 'feedsync_polls_total', { source: 'a', outcome: 'ok' })).toBe(1);
  });

  it('declares every README metric with its type and passes promtool check metrics', async () => {
    stack = await startStack({ queueCounts: async () => ({ file: counts(1, 1), hook: counts(2, 2) }) });
    emitScript(stack);
    const { text } = await scrape(stack);
    const families = metricFamilies(text);
    const expected: Record<string, string> = {
      feedsync_events_total: 'counter',
      feedsync_polls_total: 'counter',
      feedsync_poll_duration_seconds: 'histogram',
      feedsync_http_requests_total: 'counter',
      feedsync_subject_gone_total: 'counter',
      feedsync_cursor_event_id: 'gauge',
      feedsync_last_event_timestamp_seconds: 'gauge',
      feedsync_last_successful_poll_timestamp_seconds: 'gauge',
      feedsync_source_behind: 'gauge',
      feedsync_changes_enqueued_total: 'counter',
      feedsync_deliveries_total: 'counter',
      feedsync_delivery_duration_seconds: 'histogram',
      feedsync_end_to_end_seconds: 'histogram',
      feedsync_queue_jobs: 'gauge',
      feedsync_dead_letters: 'gauge',
      feedsync_sink_failing: 'gauge',
      feedsync_sink_probes_total: 'counter',
      feedsync_build_info: 'gauge',
      process_cpu_seconds_total: 'counter',
      process_start_time_seconds: 'gauge',
      nodejs_eventloop_lag_seconds: 'gauge',
    };
    for (const [name, type] of Object.entries(expected)) expect(families.get(name), name).toBe(type);

    const check = promtool(['check', 'metrics'], text);
    expect(check.output).toBe('');
    expect(check.code).toBe(0);
  });
});

describe('sink health', () => {
  it("reports each sink's own healthy() as feedsync_sink_healthy, 1 or 0", async () => {
    const events = new PipelineEvents();
    const metrics = createMetrics({
      events,
      sources: [],
      sinks: ['mirror', 'hook'],
      version: 'x',
      sinkHealth: async () => ({ mirror: true, hook: false }),
    });
    const samples = parseSamples(await metrics.registry.metrics());
    expect(sampleValue(samples, 'feedsync_sink_healthy', { sink: 'mirror' })).toBe(1);
    expect(sampleValue(samples, 'feedsync_sink_healthy', { sink: 'hook' })).toBe(0);
    metrics.close();
  });
});
