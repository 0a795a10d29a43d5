// Where subject links point and what subjects answer (issue #19 item 6, scenarios 7 and 13): a link
// to another origin gets neither a request nor our credentials unless that origin is allowed; 410
// is gone like 404; 403 and unusable links fail the page visibly (error count, /readyz) instead of
// being retried inside it for ever.
import { afterEach, expect, it } from 'vitest';
import { killAllCli } from '../support/process.js';
import {
  expectCursorUnmoved,
  expectDeliveredOnce,
  expectHealthy,
  Feed,
  healthyReply,
  makeEvents,
  metricOr,
  PASSWORD,
  Servers,
  startRun,
  subjectPath,
} from './support.js';

const servers = new Servers();
afterEach(async () => {
  await killAllCli();
  await servers.closeAll();
});

it('a subject link on another origin: no request there, refused as foreign_origin; allowed_origins → fetched with its own challenge', async () => {
  const events = makeEvents('workflow', 7041, 5);
  const foreignPath = subjectPath('workflow', 942);
  // The foreign origin serves the same feed's subjects, behind its own Digest challenge.
  const current: { feed?: Feed } = {};
  const other = await servers.start({
    name: 'other-origin',
    handler: (ctx) => healthyReply(ctx, current.feed!),
  });
  const foreignUrl = other.url(foreignPath);
  events[1]!.subject = foreignUrl; // event 7042
  const feed = (current.feed = new Feed('workflow', events));
  const upstream = await servers.start({ name: 'upstream', handler: (ctx) => healthyReply(ctx, feed) });

  const run = await startRun({ service: 'workflow', upstream, label: 'foreign-origin' });
  try {
    const failure = await run.waitForPollFailure((e) => e.includes('refused GET'), 10_000, 'a refused link');
    const err = String(failure.err);
    expect(err).toContain(`refused GET ${foreignUrl}`);
    expect(err).toMatch(/origin/i);
    expect(err, 'the error names event 7042').toMatch(/\b7042\b/);
    await expectCursorUnmoved(run, upstream, 0, feed.ids());
    expect
      .soft(await metricOr(run, 'feedsync_upstream_refusals_total', { reason: 'foreign_origin' }))
      .toBeGreaterThanOrEqual(1);
  } finally {
    expectHealthy(run, await run.finish(), { foreign: [other] });
  }

  // The same store, now with the origin allowed: the page goes through.
  const run2 = await startRun({
    service: 'workflow',
    upstream,
    dir: run.dir,
    source: { allowed_origins: [other.origin] },
    label: 'foreign-origin-allowed',
  });
  let changes;
  try {
    changes = await run2.waitForIds(feed.ids(), 10_000);
  } finally {
    expectHealthy(run2, await run2.finish());
  }
  expectDeliveredOnce(changes, feed, run2.source);
  const change = changes.find((c) => c.event_id === 7042)!;
  expect(change.subject_state).toBe('present');
  expect((change.subject as Record<string, unknown>).self_link).toBe(foreignUrl);
  const seen = other.requests.map((r) => ({ path: r.path, auth: r.authorization, status: r.status }));
  expect(seen[0], 'the other origin challenged first (its own nonce)').toEqual({
    path: foreignPath,
    auth: false,
    status: 401,
  });
  expect(
    seen.some((r) => r.path === foreignPath && r.auth && r.status === 200),
    `authenticated fetch: ${JSON.stringify(seen)}`,
  ).toBe(true);
  expect(
    seen.every((r) => r.path === foreignPath),
    'only the allowed link was requested there',
  ).toBe(true);
});

it('a subject answering 410 is delivered as gone', async () => {
  const events = makeEvents('workflow', 1301, 5);
  const gonePath = subjectPath('workflow', 1803);
  events[2]!.subject = gonePath; // event 1303
  const feed = new Feed('workflow', events);
  const upstream = await servers.start({
    name: 'upstream',
    handler: (ctx) => (ctx.path === gonePath ? { status: 410, body: '' } : healthyReply(ctx, feed)),
  });
  const foreign = await servers.foreign();
  const run = await startRun({ service: 'workflow', upstream, label: 'subject-410' });
  let changes;
  try {
    changes = await run.waitForIds(feed.ids(), 10_000);
    expect.soft(await metricOr(run, 'feedsync_polls_total', { outcome: 'error' }), 'no failed poll').toBe(0);
  } finally {
    expectHealthy(run, await run.finish(), { foreign: [foreign] });
  }
  expectDeliveredOnce(changes, feed, run.source);
  const states = Object.fromEntries(changes.map((c) => [c.event_id, c.subject_state]));
  expect(states).toEqual({
    1301: 'present',
    1302: 'present',
    1303: 'gone',
    1304: 'present',
    1305: 'present',
  });
  expect(changes.find((c) => c.event_id === 1303)!.subject).toBeNull();
  expect(upstream.requestsFor(gonePath).length, 'a gone subject is asked once, not retried').toBe(1);
});

it('a subject answering 403 fails the page (error count, /readyz 503 after 5 failures), nothing delivered until healed', async () => {
  const events = makeEvents('workflow', 1311, 5);
  const forbidden = subjectPath('workflow', 1813);
  events[2]!.subject = forbidden; // event 1313
  const feed = new Feed('workflow', events);
  const upstream = await servers.start({
    name: 'upstream',
    handler: (ctx) =>
      ctx.mode === 'hostile' && ctx.path === forbidden
        ? { status: 403, body: 'forbidden' }
        : healthyReply(ctx, feed),
  });
  const foreign = await servers.foreign();
  const run = await startRun({ service: 'workflow', upstream, label: 'subject-403' });
  let changes;
  try {
    const failure = await run.waitForPollFailure(
      (e) => e.includes(upstream.url(forbidden)),
      10_000,
      'a poll failed on the 403',
    );
    expect(String(failure.err)).toMatch(/403/);
    expect(String(failure.err), 'the error names event 1313').toMatch(/\b1313\b/);
    const ready = await run.waitForReadyz(503, 15_000);
    expect(ready.body.reasons?.join(' ')).toContain('source "workflow"');
    expect(ready.body.reasons?.join(' ')).not.toContain(PASSWORD);
    expect
      .soft(await metricOr(run, 'feedsync_polls_total', { outcome: 'error' }), 'polls{outcome="error"}')
      .toBeGreaterThanOrEqual(5);
    expect(run.changes(), 'nothing of the page delivered while a subject answers 403').toEqual([]);
    // One request per failed poll: the 403 is not retried inside the page.
    expect
      .soft(upstream.requestsFor(forbidden).length, 'requests for the 403 subject vs failed polls')
      .toBeLessThanOrEqual(run.pollFailures().length + 2);

    upstream.heal();
    changes = await run.waitForIds(feed.ids(), 15_000);
    expect
      .soft((await run.waitForReadyz(200, 5000).catch((e: Error) => e.message)) as unknown, 'ready again')
      .toMatchObject({ status: 200 });
  } finally {
    expectHealthy(run, await run.finish(), { foreign: [foreign] });
  }
  expectDeliveredOnce(changes, feed, run.source);
});

it('subject links file:///etc/passwd and "not a url": refused as unusable_link, /readyz 503; healed → delivered', async () => {
  const healed = new Feed('workflow', makeEvents('workflow', 1321, 5));
  const hostile = new Feed(
    'workflow',
    healed.events.map((e) =>
      e.id === 1322
        ? { ...e, subject: 'file:///etc/passwd' }
        : e.id === 1324
          ? { ...e, subject: 'not a url' }
          : e,
    ),
  );
  const upstream = await servers.start({
    name: 'upstream',
    handler: (ctx) => healthyReply(ctx, ctx.mode === 'hostile' ? hostile : healed),
  });
  const foreign = await servers.foreign();
  const run = await startRun({ service: 'workflow', upstream, label: 'unusable-links' });
  let changes;
  try {
    const failure = await run.waitForPollFailure((e) => e.includes('refused GET'), 10_000, 'a refused link');
    const err = String(failure.err);
    expect(
      err.includes('refused GET file:///etc/passwd') || err.includes('refused GET not a url'),
      err.slice(0, 300),
    ).toBe(true);
    await expectCursorUnmoved(run, upstream, 0, healed.ids());
    expect
      .soft(await metricOr(run, 'feedsync_upstream_refusals_total', { reason: 'unusable_link' }))
      .toBeGreaterThanOrEqual(1);
    await run.waitForReadyz(503, 15_000);

    upstream.heal();
    changes = await run.waitForIds(healed.ids(), 15_000);
  } finally {
    expectHealthy(run, await run.finish(), { foreign: [foreign] });
  }
  expectDeliveredOnce(changes, healed, run.source);
  const links = Object.fromEntries(changes.map((c) => [c.event_id, c.subject_url]));
  expect(links).toEqual(Object.fromEntries(healed.events.map((e) => [e.id, upstream.url(e.subject)])));
  expect(run.proc.text()).not.toMatch(/root:.*:0:0:/);
});
