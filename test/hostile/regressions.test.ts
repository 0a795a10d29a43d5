// What already holds and must keep holding (issue #19 item 6, scenario 14): XML entity expansion
// and external entities, deep XML, a slow-loris body, a redirect to another server, a page with a
// malformed id or timestamp. Each fails the poll naming the URL, the cursor stays, nothing leaves
// for another server, and once the upstream serves a normal page everything arrives once.
import { afterEach, expect, it } from 'vitest';
import { killAllCli } from '../support/process.js';
import {
  expectDeliveredOnce,
  expectHealthy,
  Feed,
  feedJson,
  healthyReply,
  isFeed,
  JSON_TYPE,
  jsonReply,
  makeEvents,
  Servers,
  sleep,
  startRun,
  XML_TYPE,
  type HostileUpstream,
  type Reply,
  type RouteContext,
  refusedThenHealed,
} from './support.js';

const servers = new Servers();
afterEach(async () => {
  await killAllCli();
  await servers.closeAll();
});

/**
 * A scheduling source whose first feed page is `hostile(ctx)` until healed: the poll fails with an
 * error naming the page's URL and matching `detail`, the same page is asked again, nothing of it
 * is delivered; healed, every event arrives once.
 */
function failsThenHeals(opts: {
  label: string;
  hostile: (ctx: RouteContext, foreign: HostileUpstream) => Reply;
  detail: RegExp;
  format?: 'json' | 'xml';
  first: number;
}) {
  const pageUrl = (upstream: HostileUpstream) =>
    upstream.url(upstream.feedRequests()[0]?.url ?? '/api/events');
  return refusedThenHealed(servers, {
    label: opts.label,
    feed: new Feed('scheduling', makeEvents('scheduling', opts.first, 8)),
    hostile: (ctx, foreign) => (isFeed(ctx) ? opts.hostile(ctx, foreign) : undefined),
    source: { format: opts.format ?? 'json' },
    failure: (e, upstream) => e.includes(`GET ${pageUrl(upstream)}`),
    check: (err) => expect(err).toMatch(opts.detail),
  });
}

/** A one-event XML page (the event `id`, its subject on the upstream) with a DOCTYPE and `changes` as given. */
const xmlPage = (ctx: RouteContext, id: number, doctype: string, changes: string) =>
  `<?xml version="1.0" encoding="UTF-8"?>${doctype}<events type="array"><event><id type="integer">${id}</id>` +
  `<event-type>title_updated</event-type><timestamp type="datetime">2026-11-20T10:15:02Z</timestamp>` +
  `<changes>${changes}</changes><link rel="subject" href="${ctx.origin}/api/titles/500"/></event></events>`;

const xml = (body: string): Reply => ({ status: 200, headers: { 'content-type': XML_TYPE }, body });

it('XML with nested entity expansion (billion laughs) is refused, never expanded', async () => {
  const entities = ['<!ENTITY lol "lol">'];
  for (let i = 1; i <= 9; i++)
    entities.push(`<!ENTITY lol${i} "${`&lol${i === 1 ? '' : i - 1};`.repeat(10)}">`);
  const { jsonl } = await failsThenHeals({
    label: 'xml-billion-laughs',
    format: 'xml',
    first: 1401,
    hostile: (ctx) => xml(xmlPage(ctx, 1401, `<!DOCTYPE lolz [${entities.join('')}]>`, '&lol9;')),
    detail: /entit|doctype|dtd/i,
  });
  expect(jsonl).not.toContain('lollol');
});

it.each([
  ['a local file', () => 'file:///etc/passwd'],
  ['another server', (foreign: HostileUpstream) => foreign.url('/xxe')],
])('XML with an external entity (%s) is refused; nothing is fetched', async (_name, target) => {
  const { output, jsonl } = await failsThenHeals({
    label: `xml-xxe-${_name}`,
    format: 'xml',
    first: 1411,
    hostile: (ctx, foreign) =>
      xml(xmlPage(ctx, 1411, `<!DOCTYPE x [<!ENTITY xxe SYSTEM "${target(foreign)}">]>`, '&xxe;')),
    detail: /entit|doctype|dtd/i,
  });
  expect(output).not.toMatch(/root:.*:0:0:/);
  expect(jsonl).not.toMatch(/root:.*:0:0:/);
});

it('deep XML (20,000 nested elements) is refused naming the URL', async () => {
  await failsThenHeals({
    label: 'xml-deep',
    format: 'xml',
    first: 1421,
    hostile: (ctx) => xml(xmlPage(ctx, 1421, '', `${'<a>'.repeat(20_000)}${'</a>'.repeat(20_000)}`)),
    detail: /nest|deep|depth/i,
  });
});

it('a 302 to another server is not followed (no request there) and fails the poll', async () => {
  const { foreign } = await failsThenHeals({
    label: 'redirect-302',
    first: 1431,
    hostile: (ctx, other) => ({
      status: 302,
      headers: { location: other.url(ctx.req.url ?? '/') },
      body: '',
    }),
    detail: /302/,
  });
  expect(foreign.requests).toEqual([]);
});

it.each([
  ['id', (e: Record<string, unknown>) => (e.id = '1442x'), /\bid\b/],
  ['timestamp', (e: Record<string, unknown>) => (e.timestamp = 'yesterday'), /timestamp/],
])('a page with a malformed %s is refused without moving the cursor', async (_field, spoil, detail) => {
  await failsThenHeals({
    label: `malformed-${_field}`,
    first: 1441,
    hostile: (ctx) => {
      const feed = new Feed('scheduling', makeEvents('scheduling', 1441, 8));
      const page = JSON.parse(feedJson(feed.events, ctx.origin, 'scheduling')) as {
        entries: Record<string, unknown>[];
      };
      spoil(page.entries[1]!);
      return jsonReply(JSON.stringify(page));
    },
    detail,
  });
});

it('a slow-loris body (headers, then 1 byte/s) is cut at timeout_ms; healed → delivered', async () => {
  const TIMEOUT_MS = 1500;
  const feed = new Feed('scheduling', makeEvents('scheduling', 1451, 8));
  const prefix = Buffer.from('{"resource_type":"events","entries":[');
  const upstream = await servers.start({
    name: 'upstream',
    handler: (ctx) =>
      ctx.mode === 'hostile' && isFeed(ctx)
        ? {
            status: 200,
            headers: { 'content-type': JSON_TYPE },
            chunkDelayMs: 1000,
            stream: function* () {
              for (const b of prefix) yield Buffer.from([b]);
            },
          }
        : healthyReply(ctx, feed),
  });
  const foreign = await servers.foreign();
  const run = await startRun({
    service: 'scheduling',
    upstream,
    source: { timeout_ms: TIMEOUT_MS },
    label: 'slow-loris',
  });
  let changes;
  try {
    const slow = () => upstream.feedRequests().filter((r) => r.mode === 'hostile' && r.endedAt !== undefined);
    const deadline = Date.now() + 10_000;
    while (slow().length < 2 && Date.now() < deadline) await sleep(100);
    const cut = slow();
    expect(cut.length, 'slow requests ended').toBeGreaterThanOrEqual(2);
    for (const r of cut) {
      expect(r.cutShort, 'the daemon hung up').toBe(true);
      expect(r.endedAt! - r.startedAt, 'time before the daemon hung up (ms)').toBeLessThan(TIMEOUT_MS + 1000);
      expect(r.endedAt! - r.startedAt).toBeGreaterThanOrEqual(TIMEOUT_MS - 500);
      expect(r.bytes).toBeLessThanOrEqual(3);
    }
    const url = upstream.url(cut[0]!.url);
    const line = run
      .logs()
      .find(
        (l) =>
          (l.level ?? 0) >= 40 &&
          String(l.err ?? '').includes(url) &&
          String(l.err).includes(`${TIMEOUT_MS} ms`),
      );
    expect(line, `a warning naming ${url} and the ${TIMEOUT_MS} ms timeout`).toBeDefined();
    expect(run.changes()).toEqual([]);
    upstream.heal();
    changes = await run.waitForIds(feed.ids(), 15_000);
  } finally {
    expectHealthy(run, await run.finish(), { foreign: [foreign] });
  }
  expectDeliveredOnce(changes, feed, run.source);
});
