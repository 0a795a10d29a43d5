// XML bodies built to get past the pre-scan or to stall the decoder (issue #28, items 1, 2 and 7):
// 8 MB of `<a/>` behind `<!DOCTYPE r SYSTEM "[">` (which made the old scan stop counting: 724 MB
// of RSS), the same behind a processing instruction whose quotes the parser reads differently,
// 737,364 attributes on one element, a float of 100,000 digits and an `x` (the old number pattern
// stalled /healthz for 16.5 s), and a subject whose fields are named `__proto__` and `constructor`.
// Each refused page is refused clearly (logged naming the URL, counted), the cursor stays, /healthz
// answers within a second and RSS stays under the suite's limit throughout; healed, every event
// arrives once.
import { afterEach, expect, it } from 'vitest';
import { killAllCli } from '../support/process.js';
import {
  expectDeliveredOnce,
  expectHealthy,
  Feed,
  isFeed,
  makeEvents,
  refusedThenHealed,
  Servers,
  startRun,
  XML_TYPE,
  healthyReply,
  type HostileUpstream,
  type Reply,
  type RouteContext,
} from './support.js';

const servers = new Servers();
afterEach(async () => {
  await killAllCli();
  await servers.closeAll();
});

const xml = (body: string): Reply => ({ status: 200, headers: { 'content-type': XML_TYPE }, body });

/** 8,000,000 characters (under the 8 MiB body limit): `head`, then `<a/>` to the size, then `tail`. */
function eightMegabytes(head: string, tail: string): string {
  const n = Math.floor((8_000_000 - head.length - tail.length) / 4);
  return head + '<a/>'.repeat(n) + tail;
}

/** A one-event XML page whose embedded subject holds `subject` (the event's own fields are sound). */
const pageWithSubject = (ctx: RouteContext, id: number, subject: string) =>
  `<?xml version="1.0" encoding="UTF-8"?><events type="array"><event><id type="integer">${id}</id>` +
  `<event-type>title_updated</event-type><timestamp type="datetime">2026-11-20T10:15:02Z</timestamp>` +
  `<link rel="subject" href="${ctx.origin}/api/titles/500"><subject><id type="integer">500</id>` +
  `${subject}</subject></link></event></events>`;

const pageUrl = (upstream: HostileUpstream) => upstream.url(upstream.feedRequests()[0]?.url ?? '/api/events');

function refusedXmlPage(opts: {
  label: string;
  first: number;
  hostile: (ctx: RouteContext) => Reply;
  detail: RegExp;
  metric: { name: string; labels: Record<string, string> };
}) {
  return refusedThenHealed(servers, {
    label: opts.label,
    feed: new Feed('scheduling', makeEvents('scheduling', opts.first, 8)),
    hostile: (ctx) => (isFeed(ctx) ? opts.hostile(ctx) : undefined),
    source: { format: 'xml' },
    failure: (e, upstream) => e.includes(`GET ${pageUrl(upstream)}`),
    check: (err) => expect(err).toMatch(opts.detail),
    metric: opts.metric,
    timeoutMs: 30_000,
  });
}

it('8 MB of <a/> behind <!DOCTYPE r SYSTEM "["> is refused as a DOCTYPE, counted, never parsed', async () => {
  await refusedXmlPage({
    label: 'xml-doctype-bypass',
    first: 2801,
    hostile: () => xml(eightMegabytes('<!DOCTYPE r SYSTEM "["><events type="array">', '</events>')),
    detail:
      /refused GET .*: XML body has a DOCTYPE with an external identifier .* at character 0; feedsync accepts only a bare <!DOCTYPE name>/,
    metric: { name: 'feedsync_upstream_refusals_total', labels: { reason: 'doctype' } },
  });
});

it('8 MB of <a/> behind a processing instruction with an open quote is malformed, never parsed', async () => {
  await refusedXmlPage({
    label: 'xml-pi-bypass',
    first: 2811,
    hostile: () => xml(eightMegabytes('<events type="array"><?pi "?><!-- "?>', '<!-- --></events>')),
    detail:
      /cannot decode response of GET .*: malformed XML: a processing instruction the parser would end elsewhere at character 21/,
    metric: { name: 'feedsync_polls_total', labels: { outcome: 'error' } },
  });
});

it('737,364 attributes on one element: too_many_values, counted', async () => {
  await refusedXmlPage({
    label: 'xml-attributes',
    first: 2821,
    hostile: () => xml(`<events type="array"${' a="1"'.repeat(737_364)}></events>`),
    detail: /refused GET .*: an XML element has more than 64 attributes/,
    metric: { name: 'feedsync_upstream_refusals_total', labels: { reason: 'too_many_values' } },
  });
});

it('a float of 100,000 digits and an x: a shape error at once, its text cut in the log', async () => {
  const digits = '1'.repeat(100_000);
  const { output } = await refusedXmlPage({
    label: 'xml-huge-float',
    first: 2831,
    hostile: (ctx) => xml(pageWithSubject(ctx, 2831, `<weight type="float">${digits}x</weight>`)),
    detail: new RegExp(
      `cannot decode response of GET .*: <weight> is typed float but holds "1{40}…\\[99961 more characters\\]"`,
    ),
    metric: { name: 'feedsync_polls_total', labels: { outcome: 'error' } },
  });
  // Nowhere in the daemon's output is the number whole.
  expect(output).not.toContain('1'.repeat(1_000));
});

it('a subject with fields named __proto__ and constructor is delivered with them as plain fields', async () => {
  const feed = new Feed('scheduling', makeEvents('scheduling', 2841, 1));
  const upstream = await servers.start({
    name: 'upstream',
    handler: (ctx) =>
      isFeed(ctx) && Number(ctx.query.get('newer_than') ?? 0) < 2841
        ? xml(
            pageWithSubject(
              ctx,
              2841,
              '<__proto__><polluted type="boolean">true</polluted></__proto__><constructor>c</constructor>' +
                `<link rel="prototype" href="${ctx.origin}/api/titles/501"/>`,
            ),
          )
        : healthyReply(ctx, feed),
  });
  const run = await startRun({
    service: 'scheduling',
    upstream,
    source: { format: 'xml' },
    label: 'xml-proto',
  });
  let changes;
  try {
    changes = await run.waitForIds([2841], 15_000);
  } finally {
    expectHealthy(run, await run.finish());
  }
  expectDeliveredOnce(changes, feed, run.source, [2841]);
  const subject = changes[0]!.subject as Record<string, unknown>;
  expect(Object.getPrototypeOf(subject)).toBe(Object.prototype);
  expect(Object.getOwnPropertyDescriptor(subject, '__proto__')?.value).toEqual({
    resource_type: '__proto__',
    polluted: true,
  });
  expect(subject.constructor).toBe('c');
  expect(subject.prototype_link).toBe(upstream.url('/api/titles/501'));
  expect(subject.polluted).toBeUndefined();
});
