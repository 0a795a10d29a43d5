// Memory per page and undecodable subjects (issue #28 items 3 and 6): subjects each under
// max_body_bytes that together would not fit in memory are refused per page (max_page_bytes),
// the daemon staying under 256 MB; a subject that can never be decoded stops its source by
// default, named in the log and /readyz, or is delivered as "unreadable" when the source opts in.
import { afterEach, expect, it } from 'vitest';
import type { Change } from '../../src/core/change.js';
import { killAllCli } from '../support/process.js';
import { assertValidChange } from '../support/change-schema.js';
import {
  expectDeliveredOnce,
  expectHealthy,
  Feed,
  healthyReply,
  JSON_TYPE,
  jsonReply,
  makeEvents,
  metricOr,
  Servers,
  startRun,
  subjectPath,
  type EventSpec,
} from './support.js';

const servers = new Servers();
afterEach(async () => {
  await killAllCli();
  await servers.closeAll();
});

/** 7 MB of title name: under the 8 MiB max_body_bytes on its own. */
const TITLE_CHARS = 7_000_000;
const PAD = Buffer.alloc(TITLE_CHARS, 'x');

it('two full pages of 100 distinct 7 MB subjects: the page is refused (max_page_bytes) and counted, RSS ≤ 256 MB; healed → every event delivered once', async () => {
  // Subjects not embedded in the feed: each is fetched on its own, 100 distinct titles.
  const events: EventSpec[] = makeEvents('scheduling', 1, 100, { subjects: 100, subjectBase: 5001 }).map(
    (e) => ({ ...e, embed: false }),
  );
  const feed = new Feed('scheduling', events);
  const subjects = new Set(events.map((e) => e.subject));
  const upstream = await servers.start({
    name: 'upstream',
    handler: (ctx) => {
      if (ctx.mode !== 'hostile' || !subjects.has(ctx.path)) return healthyReply(ctx, feed);
      const id = ctx.path.split('/').pop();
      const head = Buffer.from(`{"resource_type":"title","id":${id},"name":"`);
      const tail = Buffer.from(`","self_link":"${ctx.origin}${ctx.path}"}`);
      return {
        status: 200,
        headers: {
          'content-type': JSON_TYPE,
          'content-length': String(head.length + PAD.length + tail.length),
        },
        stream: () => [head, PAD, tail],
      };
    },
  });
  const run = await startRun({ service: 'scheduling', upstream, label: 'page-100x7MB' });
  let changes: Change[];
  try {
    const failure = await run.waitForPollFailure(
      (e) => e.includes('max_page_bytes'),
      30_000,
      'a page refused for max_page_bytes',
    );
    // Refused before the page's 50 subjects were all downloaded: the budget stopped the fetching.
    // (A first request capped at the fetch's share of the budget is cut at its Content-Length.)
    const downloaded = upstream.requests.filter(
      (r) => r.authenticated && subjects.has(r.path) && r.endedAt !== undefined && !r.cutShort,
    ).length;
    expect.soft(downloaded, 'subject bodies downloaded whole before the first refusal').toBeGreaterThan(0);
    expect.soft(downloaded, 'subject bodies downloaded whole before the first refusal').toBeLessThan(50);
    const err = String(failure.err);
    expect(err, 'the refusal names an event of the page and its subject').toMatch(
      /page refused: the subject of event \d+ \(http:\/\/127\.0\.0\.1:\d+\/api\/titles\/\d+\) may need up to \d+ bytes more/,
    );
    expect(err, 'the refusal names the limit').toMatch(/max_page_bytes is 16777216/);
    // The cursor stays: the first page is asked again, nothing is delivered. (The second page may
    // be listed, read ahead, but its subjects wait for the first page's bytes.)
    const deadline = Date.now() + 15_000;
    const again = () => upstream.feedRequests().filter((r) => (r.query.get('newer_than') ?? '0') === '0');
    while (again().length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(again().length, 'the refused page asked again').toBeGreaterThanOrEqual(2);
    expect(run.changes(), 'nothing delivered while the page is refused').toEqual([]);
    expect
      .soft(
        await metricOr(run, 'feedsync_page_refusals_total', { reason: 'max_page_bytes' }),
        'feedsync_page_refusals_total{reason="max_page_bytes"}',
      )
      .toBeGreaterThanOrEqual(1);

    upstream.heal();
    changes = await run.waitForIds(feed.ids(), 30_000);
  } finally {
    expectHealthy(run, await run.finish());
  }
  expectDeliveredOnce(changes, feed, run.source);
  expect(changes.every((c) => c.subject_state === 'present')).toBe(true);
});

/** A JSON title nested `depth` arrays deep (the limit is 64 levels). */
function deepTitle(id: number, depth: number): string {
  return `{"resource_type":"title","id":${id},"tree":${'['.repeat(depth)}${']'.repeat(depth)}}`;
}

/** Events 9001..9006, the fourth (9004) with a subject nested past the depth limit. */
function poisonFeed(): { feed: Feed; poisonPath: string; poisonId: number } {
  const events = makeEvents('scheduling', 9001, 6, { subjects: 3, subjectBase: 701 }).map((e) => ({
    ...e,
    embed: false,
  }));
  const poisonPath = subjectPath('scheduling', 799);
  events[3] = { ...events[3]!, subject: poisonPath, type: 'title_created' };
  return { feed: new Feed('scheduling', events), poisonPath, poisonId: 9004 };
}

it('a subject nested past the depth limit stops its source by default: named in the log and /readyz, counted, nothing after it delivered', async () => {
  const { feed, poisonPath, poisonId } = poisonFeed();
  const upstream = await servers.start({
    name: 'upstream',
    handler: (ctx) => (ctx.path === poisonPath ? jsonReply(deepTitle(799, 100)) : healthyReply(ctx, feed)),
  });
  const run = await startRun({ service: 'scheduling', upstream, label: 'poison-stop' });
  try {
    const failure = await run.waitForPollFailure(
      (e) => e.includes('stopped at event'),
      15_000,
      'the source stopped on the poison subject',
    );
    const err = String(failure.err);
    expect(failure.level, 'logged as an error').toBe(50);
    expect(err).toContain(`source scheduling stopped at event ${poisonId} (title_created)`);
    expect(err).toContain(`refused GET ${upstream.url(poisonPath)}`);
    expect(err).toMatch(/too_deep/);
    expect(err, 'says how to move on').toContain('on_undecodable_subject');
    expect(err, 'says how to move on').toContain(`feedsync cursor set scheduling ${poisonId}`);

    const ready = await run.waitForReadyz(503, 5000);
    expect(ready.body.reasons?.join('\n')).toContain(`stopped at event ${poisonId} (title_created)`);
    expect(ready.body.reasons?.join('\n')).toContain(upstream.url(poisonPath));
    expect
      .soft(await metricOr(run, 'feedsync_undecodable_subjects_total', { action: 'stopped' }))
      .toBeGreaterThanOrEqual(1);

    // No busy loop: retried like wrong credentials (no faster than poll_interval_ms, backing off).
    const before = upstream.feedRequests().length;
    await new Promise((r) => setTimeout(r, 2000));
    const retries = upstream.feedRequests().length - before;
    expect(retries, 'feed requests in 2 s while stopped (poll_interval_ms 100)').toBeLessThanOrEqual(8);
    expect(run.changes(), 'nothing of the page, nothing after it').toEqual([]);
  } finally {
    expectHealthy(run, await run.finish());
  }
});

it('with on_undecodable_subject: deliver_unreadable the change arrives as "unreadable" with the reason, counted, and later events flow', async () => {
  const { feed, poisonPath, poisonId } = poisonFeed();
  const upstream = await servers.start({
    name: 'upstream',
    handler: (ctx) => (ctx.path === poisonPath ? jsonReply(deepTitle(799, 100)) : healthyReply(ctx, feed)),
  });
  const run = await startRun({
    service: 'scheduling',
    upstream,
    source: { on_undecodable_subject: 'deliver_unreadable' },
    label: 'poison-deliver',
  });
  let changes: Change[];
  try {
    changes = await run.waitForIds(feed.ids(), 15_000);
    const poison = changes.find((c) => c.event_id === poisonId)!;
    expect(poison).toMatchObject({
      subject_state: 'unreadable',
      subject: null,
      subject_url: upstream.url(poisonPath),
    });
    expect(poison.subject_error).toMatch(/^too_deep: JSON nesting is deeper than 64 levels/);
    for (const c of changes) assertValidChange(c);
    expect(changes.filter((c) => c.subject_state !== 'present').map((c) => c.event_id)).toEqual([poisonId]);
    expect
      .soft(await metricOr(run, 'feedsync_undecodable_subjects_total', { action: 'delivered_unreadable' }))
      .toBe(1);
    expect((await run.readyz()).status, 'a source that delivers unreadable subjects stays ready').toBe(200);
  } finally {
    expectHealthy(run, await run.finish());
  }
  expectDeliveredOnce(changes, feed, run.source);
});
