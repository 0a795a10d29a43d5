import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { drain, feedPage, harness, type Harness } from './helpers.js';
import { normalizeJson, xmlToJson } from './xml-normalize.js';

const EMBED_EXTERNAL_ID = [
  'brand',
  'contributor',
  'deal',
  'image',
  'platform',
  'rendition',
  'scheduling',
  'title',
];
const typeOf = (eventType: string) => eventType.replace(/_(metadata_updated|created|updated|deleted)$/, '');

describe('sandbox subjects and expansion', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await harness({ seed: 11, backlog: 1500 });
  });
  afterAll(() => h.sb.close());

  it('roots list their links', async () => {
    const root = await h.client.getJson(`${h.base.scheduling}/api`);
    expect(root.resource_type).toBe('catalog');
    expect(root.schedulings_link).toBe(`${h.base.scheduling}/api/schedule/schedulings`);
    for (const rel of [
      'titles',
      'title_groups',
      'brands',
      'events',
      'rules',
      'enumerations',
      'denied_rights',
    ]) {
      expect(root[`${rel}_link`]).toMatch(new RegExp(`^${h.base.scheduling}/api/`));
    }
    expect(await h.client.getJson(`${h.base.workflow}/api`)).toEqual({
      resource_type: 'workflow',
      events_link: `${h.base.workflow}/api/events`,
    });
  });

  it('expand=subject embeds the current subject; external_id only for the listed types', async () => {
    const events = await drain(h, 'scheduling', 'expand=subject');
    const live = h.sb.liveState('scheduling');
    let embedded = 0;
    let withoutExtId = 0;
    for (const e of events) {
      const current = live[e.subject_link];
      if (!current) {
        expect(e.subject).toBeUndefined();
        continue;
      }
      embedded++;
      const type = typeOf(e.event_type);
      expect(e.subject!.resource_type).toBe('subject');
      const { resource_type: _t, external_id, ...rest } = current;
      const { resource_type: _s, ...embeddedFields } = e.subject!;
      if (EMBED_EXTERNAL_ID.includes(type)) {
        expect(embeddedFields).toEqual({ ...rest, ...(external_id !== undefined ? { external_id } : {}) });
      } else {
        expect(embeddedFields).toEqual(rest);
        if (external_id !== undefined) withoutExtId++;
      }
    }
    expect(embedded).toBeGreaterThan(100);
    // Title groups and assets have an external_id on GET but not when embedded.
    expect(withoutExtId).toBeGreaterThan(0);
    const plain = await feedPage(h, 'scheduling', 'newer_than=0');
    expect(plain.some((e) => 'subject' in e)).toBe(false);
  });

  it('expand=source embeds the rule of every scheduling_created', async () => {
    const events = await drain(h, 'scheduling', 'event_type=scheduling_created&expand=source');
    expect(events.length).toBeGreaterThan(0);
    for (const e of events) {
      expect(e.source_link).toMatch(new RegExp(`^${h.base.scheduling}/api/rules/\\d+$`));
      expect(e.source).toMatchObject({
        resource_type: 'rule',
        transmission_type: 'rerun',
        self_link: e.source_link,
      });
      expect(await h.client.getJson(e.source_link!)).toEqual(e.source);
    }
    const others = await feedPage(h, 'scheduling', 'newer_than=0&event_type=title_created&expand=source');
    expect(others.every((e) => e.source_link === undefined)).toBe(true);
  });

  it('GET of a subject returns the live state; 404 with an empty body once deleted', async () => {
    for (const service of ['scheduling', 'workflow'] as const) {
      const live = h.sb.liveState(service);
      const urls = Object.keys(live).slice(0, 30);
      for (const url of urls) expect(await h.client.getJson(url)).toEqual(live[url]);
      const deleted = h.sb
        .events(service)
        .filter((e) => e.operation === 'deleted')
        .slice(0, 10);
      expect(deleted.length).toBeGreaterThan(0);
      h.sb.resetStats();
      for (const e of deleted) {
        expect(live[e.subject_url]).toBeUndefined();
        const res = await h.client.get(e.subject_url);
        expect(res.status).toBe(404);
        expect(await res.text()).toBe('');
      }
      expect(h.sb.stats()[service].subject_not_found).toBe(deleted.length);
    }
  });

  it('workflow: deleting a job removes its assets and tasks (with their own deleted events)', async () => {
    const events = h.sb.events('workflow');
    const live = h.sb.liveState('workflow');
    const jobDeletes = events.filter((e) => e.event_type === 'job_deleted');
    expect(jobDeletes.length).toBeGreaterThan(0);
    for (const e of jobDeletes) {
      expect(Object.keys(live).some((url) => url.startsWith(`${e.subject_url}/`))).toBe(false);
      const children = events.filter((c) => c.subject_url.startsWith(`${e.subject_url}/`));
      const created = children.filter((c) => c.operation === 'created').length;
      expect(children.filter((c) => c.operation === 'deleted').length).toBe(created);
    }
  });

  it('an update really changes the fields it lists', async () => {
    h.sb.generate('scheduling', 300);
    const before = h.sb.liveState('scheduling');
    const lastId = h.sb.events('scheduling').at(-1)!.id;
    h.sb.generate('scheduling', 200);
    const updates = h.sb
      .events('scheduling')
      .filter((e) => e.id > lastId && e.operation === 'updated' && before[e.subject_url]);
    expect(updates.length).toBeGreaterThan(5);
    const e = updates[0]!;
    const now = await h.client.getJson(e.subject_url);
    expect(
      e.changes.some(
        (field) =>
          JSON.stringify(now[field] ?? now[`${field}_link`]) !==
          JSON.stringify(before[e.subject_url]![field] ?? before[e.subject_url]![`${field}_link`]),
      ),
    ).toBe(true);
  });

  it('XML and JSON of the same resources describe the same data', async () => {
    const live = h.sb.liveState('scheduling');
    const byType = new Map<string, string>();
    for (const [url, res] of Object.entries(live))
      if (!byType.has(res.resource_type)) byType.set(res.resource_type, url);
    expect(byType.size).toBeGreaterThan(15);
    const aliases = { assets: 'asset' };
    for (const url of byType.values()) {
      const json = await h.client.getJson(url);
      const xml = await h.client.getText(url);
      expect(xmlToJson(xml, aliases)).toEqual(normalizeJson(json));
    }
    const schedulingUrl = byType.get('scheduling')!;
    const xml = await h.client.getText(schedulingUrl);
    if (live[schedulingUrl]!.asset_link) expect(xml).toContain('<link rel="assets"');
    expect(xml).not.toContain('rel="asset"');
  });

  it('feed pages read as XML equal the JSON ones (embedded subjects, offsets, escaping)', async () => {
    for (const query of ['newer_than=0&expand=subject,source', 'expand=subject']) {
      const url = `${h.base.scheduling}/api/events?${query}`;
      const json = await h.client.getJson(url);
      const xml = await h.client.getText(url);
      expect(xml).toMatch(/<events type="array">/);
      expect(xmlToJson(xml, { assets: 'asset' })).toEqual(normalizeJson(json));
    }
    const wfUrl = `${h.base.workflow}/api/events?newer_than=0`;
    expect(xmlToJson(await h.client.getText(wfUrl))).toEqual(normalizeJson(await h.client.getJson(wfUrl)));
    const names = Object.values(h.sb.liveState('scheduling'))
      .map((r) => r.name)
      .filter((n): n is string => typeof n === 'string');
    expect(names.some((n) => /[&<"']/.test(n))).toBe(true);
    expect(names.some((n) => n !== n.trim())).toBe(true);
    expect(names.some((n) => /[^ -~]/.test(n))).toBe(true);
  });

  it('an empty page is an empty collection in both formats; no Accept gives XML', async () => {
    const last = h.sb.events('workflow').at(-1)!.id;
    const url = `${h.base.workflow}/api/events?newer_than=${last}`;
    expect(await h.client.getJson(url)).toEqual({ resource_type: 'events', entries: [] });
    expect(await h.client.getText(url)).toContain('<events type="array"/>');
    const res = await h.client.get(url);
    expect(res.headers.get('content-type')).toBe('application/xml; charset=utf-8');
    const json = await h.client.get(url, { accept: 'application/json' });
    expect(json.headers.get('content-type')).toBe('application/json; charset=utf-8');
  });
});
