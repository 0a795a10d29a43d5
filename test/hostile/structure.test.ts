// Bodies small enough to download but hostile in shape (issue #19 item 6, scenarios 6, 11, 12):
// nesting deep enough to exhaust a recursive walk, hundreds of event types minting metric series,
// bytes that are not UTF-8.
import { afterEach, expect, it } from 'vitest';
import { killAllCli } from '../support/process.js';
import {
  expectDeliveredOnce,
  expectHealthy,
  expectRefusalText,
  Feed,
  healthyReply,
  isFeed,
  jsonReply,
  logText,
  makeEvents,
  metricOr,
  Servers,
  startRun,
  subjectPath,
  refusedThenHealed,
} from './support.js';

const servers = new Servers();
afterEach(async () => {
  await killAllCli();
  await servers.closeAll();
});

const NAMES_DEPTH = /deep|depth|nest/i;

it('a feed page of 100,000 nested JSON arrays is refused as too_deep naming the URL; healed → delivered', async () => {
  const deep = `{"resource_type":"events","entries":[${'['.repeat(100_000)}${']'.repeat(100_000)}]}`;
  await refusedThenHealed(servers, {
    label: 'deep-feed',
    feed: new Feed('scheduling', makeEvents('scheduling', 601, 12)),
    hostile: (ctx) => (isFeed(ctx) ? jsonReply(deep) : undefined),
    failure: (e) => e.includes('refused GET'),
    check: (err, upstream) =>
      expectRefusalText(err, upstream.url(upstream.feedRequests()[0]!.url), NAMES_DEPTH),
    metric: { name: 'feedsync_upstream_refusals_total', labels: { reason: 'too_deep' } },
    timeoutMs: 10_000,
  });
});

it('a subject nested 3,000 deep is refused as too_deep naming the subject URL and the event id; healed → delivered', async () => {
  const events = makeEvents('workflow', 7011, 5);
  const deepPath = subjectPath('workflow', 913);
  events[2]!.subject = deepPath; // event 7013
  const deep = `{"resource_type":"job","id":913,"tree":${'['.repeat(3000)}${']'.repeat(3000)}}`;
  await refusedThenHealed(servers, {
    label: 'deep-subject',
    feed: new Feed('workflow', events),
    hostile: (ctx) => (ctx.path === deepPath ? jsonReply(deep) : undefined),
    failure: (e) => e.includes('refused GET'),
    check: (err, upstream) => {
      expectRefusalText(err, upstream.url(deepPath), NAMES_DEPTH);
      expect(err, 'the error names event 7013').toMatch(/\b7013\b/);
    },
    metric: { name: 'feedsync_upstream_refusals_total', labels: { reason: 'too_deep' } },
    timeoutMs: 10_000,
  });
});

it('400 distinct unknown event types: every event delivered, feedsync_events_total keeps to known types + "unknown"', async () => {
  // ids 1101..1520: 20 known (title_updated / brand_created on multiples of 21), 400 unknown.
  const type = (id: number) =>
    id % 42 === 0 ? 'brand_created' : id % 21 === 0 ? 'title_updated' : `widget${id}_frobbed`;
  const feed = new Feed('scheduling', makeEvents('scheduling', 1101, 420, { type, subjects: 7 }));
  const unknown = feed.events.filter((e) => e.type.startsWith('widget')).length;
  expect(unknown).toBe(400);
  const upstream = await servers.start({ name: 'upstream', handler: (ctx) => healthyReply(ctx, feed) });
  const foreign = await servers.foreign();
  const run = await startRun({ service: 'scheduling', upstream, label: 'unknown-types' });
  let changes;
  try {
    changes = await run.waitForIds(feed.ids(), 15_000);
    const byType = new Map(
      (await run.series('feedsync_events_total'))
        .filter((s) => s.labels.source === run.source)
        .map((s) => [s.labels.event_type!, s.value]),
    );
    const labels = [...byType.keys()].sort();
    expect
      .soft(
        labels.length,
        `event_type series: ${labels.slice(0, 8).join(', ')}${labels.length > 8 ? ', …' : ''}`,
      )
      .toBeLessThanOrEqual(3);
    expect
      .soft(
        labels.filter((t) => !['brand_created', 'title_updated', 'unknown'].includes(t)).slice(0, 5),
        'event_type values outside the spec',
      )
      .toEqual([]);
    expect.soft(byType.get('unknown'), 'events_total{event_type="unknown"}').toBe(400);
    expect
      .soft(
        (byType.get('title_updated') ?? 0) + (byType.get('brand_created') ?? 0),
        'known types counted by name',
      )
      .toBe(20);
  } finally {
    expectHealthy(run, await run.finish(), { foreign: [foreign] });
  }
  expectDeliveredOnce(changes, feed, run.source);
  const want = new Map(feed.events.map((e) => [e.id, e.type]));
  expect(
    changes.filter((c) => c.event_type !== want.get(c.event_id)).map((c) => c.key),
    'changes keep their own event_type',
  ).toEqual([]);
});

it('a subject body with invalid UTF-8: counted, a warning names the URL, the change is delivered', async () => {
  const events = makeEvents('workflow', 1201, 5);
  const badPath = subjectPath('workflow', 1903);
  events[2]!.subject = badPath; // event 1203
  const feed = new Feed('workflow', events);
  const bad = Buffer.concat([
    Buffer.from('{"resource_type":"job","id":1903,"name":"bad '),
    Buffer.from([0xff, 0xfe, 0xc3]),
    Buffer.from(' bytes"}'),
  ]);
  const upstream = await servers.start({
    name: 'upstream',
    handler: (ctx) => (ctx.path === badPath ? jsonReply(bad) : healthyReply(ctx, feed)),
  });
  const foreign = await servers.foreign();
  const run = await startRun({ service: 'workflow', upstream, label: 'invalid-utf8' });
  let changes;
  try {
    changes = await run.waitForIds(feed.ids(), 10_000);
    expect
      .soft(await metricOr(run, 'feedsync_upstream_invalid_utf8_total'), 'invalid_utf8_total')
      .toBeGreaterThanOrEqual(1);
    const url = upstream.url(badPath);
    const warning = run.logs().find((l) => (l.level ?? 0) >= 40 && logText(l).includes(url));
    expect.soft(warning, `a warning naming ${url}`).toBeDefined();
  } finally {
    expectHealthy(run, await run.finish(), { foreign: [foreign] });
  }
  expectDeliveredOnce(changes, feed, run.source);
  const change = changes.find((c) => c.event_id === 1203)!;
  expect(change.subject_state).toBe('present');
  expect(String((change.subject as Record<string, unknown>).name)).toContain('\uFFFD');
});
