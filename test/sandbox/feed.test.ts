import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { drain, feedPage, harness, type Harness } from './helpers.js';

describe('sandbox feed', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await harness({ seed: 7, backlog: 400, workflowDisorder: 3 });
  });
  afterAll(() => h.sb.close());

  it('scheduling: without newer_than lists the LAST 50 events, oldest first', async () => {
    const page = await feedPage(h, 'scheduling');
    const all = h.sb.events('scheduling');
    expect(all).toHaveLength(400);
    expect(page.map((e) => e.id)).toEqual(all.slice(-50).map((e) => e.id));
  });

  it('scheduling: newer_than pages through every event exactly once, in id order', async () => {
    const first = await feedPage(h, 'scheduling', 'newer_than=0');
    expect(first).toHaveLength(50);
    expect(first.map((e) => e.id)).toEqual(
      h.sb
        .events('scheduling')
        .slice(0, 50)
        .map((e) => e.id),
    );
    const all = await drain(h, 'scheduling');
    expect(all.map((e) => e.id)).toEqual(h.sb.events('scheduling').map((e) => e.id));
    const ids = all.map((e) => e.id);
    expect([...ids].sort((a, b) => a - b)).toEqual(ids);
    // Ids are not contiguous: the generator skips some.
    expect(ids.some((id, i) => i > 0 && id - (ids[i - 1] as number) > 1)).toBe(true);
  });

  it('newer_than returns only greater ids and nothing past the end', async () => {
    const events = h.sb.events('scheduling');
    const pivot = events[123]!.id;
    const page = await feedPage(h, 'scheduling', `newer_than=${pivot}`);
    expect(page[0]!.id).toBe(events[124]!.id);
    expect(page.every((e) => e.id > pivot)).toBe(true);
    expect(await feedPage(h, 'scheduling', `newer_than=${events.at(-1)!.id}`)).toEqual([]);
  });

  it('event_type filters (comma list, unknown types match nothing, empty value = no filter)', async () => {
    const all = h.sb.events('scheduling');
    const types = ['title_created', 'brand_updated'];
    const want = all.filter((e) => types.includes(e.event_type));
    const got = await drain(h, 'scheduling', `event_type=${types.join(',')}`);
    expect(got.map((e) => e.id)).toEqual(want.map((e) => e.id));
    expect(got.length).toBeGreaterThan(0);
    expect(await feedPage(h, 'scheduling', 'newer_than=0&event_type=no_such_type')).toEqual([]);
    const unfiltered = await feedPage(h, 'scheduling', 'newer_than=0&event_type=');
    expect(unfiltered.map((e) => e.id)).toEqual(all.slice(0, 50).map((e) => e.id));
  });

  it('newer_than and event_type combine', async () => {
    const all = h.sb.events('scheduling');
    const pivot = all[200]!.id;
    const want = all.filter((e) => e.id > pivot && e.event_type.endsWith('_deleted')).slice(0, 50);
    const types = [...new Set(all.map((e) => e.event_type).filter((t) => t.endsWith('_deleted')))];
    const page = await feedPage(h, 'scheduling', `newer_than=${pivot}&event_type=${types.join(',')}`);
    expect(page.map((e) => e.id)).toEqual(want.map((e) => e.id));
  });

  it('rejects a non-integer newer_than with 400', async () => {
    const res = await h.client.get(`${h.base.scheduling}/api/events?newer_than=abc`);
    expect(res.status).toBe(400);
    expect(await res.text()).toContain('newer_than');
    const wf = await h.client.get(`${h.base.workflow}/api/events?newer_than=1.5`);
    expect(wf.status).toBe(400);
  });

  it('workflow: lists by timestamp, some ids out of order, never more than the bound away', async () => {
    const all = h.sb.events('workflow');
    const byTs = [...all].sort(
      (a, b) => Date.parse(a.occurred_at) - Date.parse(b.occurred_at) || a.id - b.id,
    );
    const page = await feedPage(h, 'workflow');
    // Without newer_than: the OLDEST 50 (the sandbox's documented choice).
    expect(page.map((e) => e.id)).toEqual(byTs.slice(0, 50).map((e) => e.id));
    const times = page.map((e) => Date.parse(e.timestamp));
    expect([...times].sort((a, b) => a - b)).toEqual(times);

    const listed = await drain(h, 'workflow', '', 3);
    expect(listed.map((e) => e.id).sort((a, b) => a - b)).toEqual(all.map((e) => e.id));
    const idRank = new Map([...all].map((e, i) => [e.id, i]));
    const displacement = byTs.map((e, i) => Math.abs(i - idRank.get(e.id)!));
    expect(Math.max(...displacement)).toBeGreaterThan(0);
    expect(Math.max(...displacement)).toBeLessThanOrEqual(3);
  });

  it('workflow: newer_than filters by id while ordering by timestamp, at every cursor', async () => {
    const all = h.sb.events('workflow');
    const byTs = [...all].sort(
      (a, b) => Date.parse(a.occurred_at) - Date.parse(b.occurred_at) || a.id - b.id,
    );
    // Every cursor position, so that cursors inside disordered blocks are exercised too.
    for (let i = 0; i < all.length; i += 2) {
      const cursor = all[i]!.id;
      const page = await feedPage(h, 'workflow', `newer_than=${cursor}`);
      const want = byTs.filter((e) => e.id > cursor).slice(0, 50);
      expect(page.map((e) => e.id)).toEqual(want.map((e) => e.id));
    }
    const pivot = all[100]!.id;
    const filtered = await feedPage(h, 'workflow', `newer_than=${pivot}&event_type=job_updated,task_created`);
    expect(filtered.length).toBeGreaterThan(0);
    expect(
      filtered.every((e) => e.id > pivot && ['job_updated', 'task_created'].includes(e.event_type)),
    ).toBe(true);
  });

  it('workflow ignores expand; GET /api/events/{id} returns one event on both services', async () => {
    const page = await feedPage(h, 'workflow', 'newer_than=0&expand=subject');
    expect(page.some((e) => 'subject' in e)).toBe(false);
    for (const service of ['scheduling', 'workflow'] as const) {
      const ev = h.sb.events(service)[10]!;
      const got = await h.client.getJson(ev.event_url);
      expect(got).toMatchObject({
        resource_type: 'event',
        id: ev.id,
        event_type: ev.event_type,
        self_link: ev.event_url,
      });
      const missing = await h.client.get(`${h.base[service]}/api/events/1`);
      expect(missing.status).toBe(404);
    }
  });

  it('events carry changes only on updates, and timestamps in Z or numeric offsets', async () => {
    const events = await drain(h, 'scheduling');
    for (const e of events)
      expect('changes' in e).toBe(
        e.event_type.endsWith('_updated') && !e.event_type.endsWith('_metadata_updated'),
      );
    expect(events.some((e) => /[+-]\d\d:\d\d$/.test(e.timestamp))).toBe(true);
    expect(events.some((e) => e.timestamp.endsWith('Z'))).toBe(true);
    const known = new Map(h.sb.events('scheduling').map((e) => [e.id, e]));
    for (const e of events) expect(new Date(e.timestamp).toISOString()).toBe(known.get(e.id)!.occurred_at);
    const wf = await drain(h, 'workflow', 'event_type=job_updated,asset_updated,task_updated', 3);
    const names = new Set(wf.flatMap((e) => e.changes!.split(',').map((n) => n.trim())));
    expect([...names].every((n) => !n.includes('_'))).toBe(true);
    expect(names.has('type-name') || names.has('due-date')).toBe(true);
  });
});
