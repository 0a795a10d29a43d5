import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { harness, type Harness } from './helpers.js';

async function control(h: Harness, method: 'GET' | 'POST', path: string, body?: unknown) {
  const res = await fetch(`${h.sb.controlUrl}${path}`, {
    method,
    ...(body !== undefined
      ? { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }
      : {}),
  });
  return { status: res.status, body: (await res.json()) as any };
}

describe('sandbox control API and JS API', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await harness({ seed: 3, backlog: 100 });
  });
  afterAll(() => h.sb.close());

  it('readyLine carries the keys the README documents', () => {
    expect(h.sb.readyLine()).toEqual({
      scheduling_base_url: h.sb.schedulingBaseUrl,
      workflow_base_url: h.sb.workflowBaseUrl,
      username: 'sandbox',
      password: 'sandbox-secret',
      control_url: h.sb.controlUrl,
    });
    expect(h.sb.schedulingBaseUrl).toBe(`http://127.0.0.1:${h.sb.port}/scheduling`);
    expect(h.sb.controlUrl).toBe(`http://127.0.0.1:${h.sb.port}/_control`);
  });

  it('stats count requests per kind and reset', async () => {
    await control(h, 'POST', '/stats/reset');
    const live = Object.keys(h.sb.liveState('scheduling'));
    await h.client.get(`${h.base.scheduling}/api`);
    await h.client.get(`${h.base.scheduling}/api/events`);
    await h.client.get(live[0]!);
    await h.client.get(`${h.base.scheduling}/api/nothing/here`);
    const { status, body } = await control(h, 'GET', '/stats');
    expect(status).toBe(200);
    expect(body.scheduling.requests).toEqual({ root: 1, feed: 1, subject: 1, event: 0, other: 1 });
    expect(body.scheduling.statuses).toMatchObject({ '200': 3, '404': 1, '401': 1 });
    expect(body.workflow.requests.feed).toBe(0);
    const reset = await control(h, 'POST', '/stats/reset');
    expect(reset.body.scheduling.requests.feed).toBe(0);
  });

  it('generate appends events now; events and live state are served', async () => {
    const before = h.sb.events('workflow').length;
    const started = Date.now();
    const res = await control(h, 'POST', '/generate', { service: 'workflow', count: 25 });
    expect(res.status).toBe(200);
    const events = (await control(h, 'GET', '/events/workflow')).body as {
      id: number;
      occurred_at: string;
    }[];
    expect(events).toHaveLength(before + 25);
    expect(res.body.last_event_id).toBe(events.at(-1)!.id);
    for (const e of events.slice(-25)) {
      expect(Date.parse(e.occurred_at)).toBeGreaterThanOrEqual(started - 1000);
      expect(Date.parse(e.occurred_at)).toBeLessThanOrEqual(Date.now() + 50);
    }
    const live = (await control(h, 'GET', '/live/workflow')).body;
    expect(live).toEqual(h.sb.liveState('workflow'));
    const url = Object.keys(live)[0]!;
    expect(await h.client.getJson(url)).toEqual(live[url]);
  });

  it('faults and rate are settable over HTTP', async () => {
    const set = await control(h, 'POST', '/faults', { rate: 1, kinds: ['status_503'], paths: 'feed' });
    expect(set.body).toEqual({ rate: 1, kinds: ['status_503'], paths: 'feed' });
    expect((await h.client.get(`${h.base.workflow}/api/events`)).status).toBe(503);
    await control(h, 'POST', '/faults', { rate: 0 });
    expect((await h.client.get(`${h.base.workflow}/api/events`)).status).toBe(200);

    const before = h.sb.events('scheduling').length;
    expect((await control(h, 'POST', '/rate', { events_per_s: 50 })).status).toBe(200);
    await new Promise((r) => setTimeout(r, 600));
    await control(h, 'POST', '/rate', { events_per_s: 0 });
    const grown = h.sb.events('scheduling').length - before;
    expect(grown).toBeGreaterThanOrEqual(10);
    expect(grown).toBeLessThanOrEqual(50);
    const newest = h.sb.events('scheduling').at(-1)!;
    expect(Date.now() - Date.parse(newest.occurred_at)).toBeLessThan(2000);
  });

  it('bad control input gets 400 naming the culprit; unknown routes 404', async () => {
    const bad = await control(h, 'POST', '/generate', { service: 'nope', count: 1 });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatch(/^service: /);
    expect((await control(h, 'POST', '/faults', { rate: 'x' })).body.error).toMatch(/faults\.rate/);
    expect((await control(h, 'POST', '/rate', { events_per_s: -1 })).status).toBe(400);
    expect((await control(h, 'GET', '/events/nope')).status).toBe(400);
    expect((await control(h, 'GET', '/nothing')).status).toBe(404);
    const notJson = await fetch(`${h.sb.controlUrl}/faults`, { method: 'POST', body: '{' });
    expect(notJson.status).toBe(400);
  });

  it('setLatency delays every answer from then on; a bad value names latency_ms', async () => {
    const timed = async (): Promise<number> => {
      const started = performance.now();
      await h.client.get(`${h.base.scheduling}/api/events`);
      return performance.now() - started;
    };
    try {
      h.sb.setLatency(300);
      expect(await timed()).toBeGreaterThanOrEqual(290);
    } finally {
      h.sb.setLatency(0);
    }
    expect(await timed()).toBeLessThan(290);
    expect(() => h.sb.setLatency(-1)).toThrow(/^latency_ms: must be a number >= 0, got -1/);
    expect(() => h.sb.setLatency(Number.NaN)).toThrow(/^latency_ms: /);
  });

  it('rejects invalid options with a typed error naming the option', async () => {
    const { startSandbox } = await import('../../src/sandbox/index.js');
    await expect(startSandbox({ faultRate: 1.5 })).rejects.toThrow(/^faultRate: /);
    await expect(startSandbox({ backlog: -1 })).rejects.toThrow(/^backlog: /);
    await expect(startSandbox({ port: h.sb.port })).rejects.toThrow(/^port: cannot listen/);
  });
});
