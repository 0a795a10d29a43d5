// Endless and huge bodies streamed lazily by the server (issue #19 item 6, scenarios 4–5): the
// daemon must hang up near max_body_bytes (bytes counted by the server, not by us), keep its RSS
// under 256 MB and /healthz live, and not hammer the server (downloads paced by the poll backoff).
import { afterEach, expect, it } from 'vitest';
import { killAllCli } from '../support/process.js';
import {
  expectDeliveredOnce,
  expectHealthy,
  expectRefusalText,
  Feed,
  healthyReply,
  isFeed,
  JSON_TYPE,
  lazyBody,
  makeEvents,
  metricOr,
  MiB,
  Servers,
  sleep,
  startRun,
  type RecordedRequest,
} from './support.js';

const servers = new Servers();
afterEach(async () => {
  await killAllCli();
  await servers.closeAll();
});

/** What the server may have written for one refused body: 2 × the limit plus socket buffers. */
const MAX_BYTES_PER_REQUEST = 32 * MiB;
const NAMES_BYTE_LIMIT = /8388608|8 ?MiB|max_body_bytes/;

/** The most requests of `requests` in flight at one moment. */
function maxInFlight(requests: RecordedRequest[]): number {
  // A request the client cut short is seen closed here a moment after the client let go of it and
  // may already have started the next request of that slot (a subject asked again with more room
  // after its first, capped request: docs/upstream-security.md "Memory per page").
  const CLOSE_LAG_MS = 100;
  const edges = requests.flatMap((r) => [
    { t: r.startedAt, d: 1 },
    {
      t:
        r.endedAt === undefined
          ? Number.POSITIVE_INFINITY
          : r.cutShort
            ? Math.max(r.startedAt, r.endedAt - CLOSE_LAG_MS)
            : r.endedAt,
      d: -1,
    },
  ]);
  edges.sort((a, b) => a.t - b.t || a.d - b.d);
  let now = 0;
  let max = 0;
  for (const e of edges) max = Math.max(max, (now += e.d));
  return max;
}

it('a 500 MB chunked page without Content-Length: cut near the limit, downloads paced by the backoff, RSS ≤ 256 MB', async () => {
  const WINDOW_MS = 15_000;
  const feed = new Feed('scheduling', makeEvents('scheduling', 301, 10));
  const upstream = await servers.start({
    name: 'upstream',
    handler: (ctx) =>
      isFeed(ctx)
        ? {
            status: 200,
            headers: { 'content-type': JSON_TYPE },
            stream: lazyBody('{"resource_type":"events","entries":[', '{},', 500_000_000, '{}]}'),
          }
        : healthyReply(ctx, feed),
  });
  const foreign = await servers.foreign();
  // poll_interval_ms ≥ 1000: the error backoff's base is min(1000, poll_interval_ms) = 1000 ms. With
  // full jitter, more than 6 downloads in 15 s happens about once in 300 runs of a correct product.
  const run = await startRun({
    service: 'scheduling',
    upstream,
    source: { poll_interval_ms: 1000 },
    label: 'chunked-500MB',
  });
  const downloads = () => upstream.feedRequests().filter((r) => r.status === 200);
  try {
    const deadline = Date.now() + 10_000;
    while (downloads().length === 0 && Date.now() < deadline && !run.proc.exit) await sleep(50);
    expect(downloads().length, 'a first download of the endless page').toBeGreaterThan(0);
    const first = downloads()[0]!.startedAt;
    while (Date.now() < first + WINDOW_MS && !run.proc.exit) await sleep(100);
    // Let the last download in the window end (the daemon hangs up or times out).
    await sleep(1000);

    const inWindow = downloads().filter((r) => r.startedAt <= first + WINDOW_MS);
    const perRequest = inWindow.map(
      (r) => `${(r.bytes / MiB).toFixed(1)} MiB${r.cutShort ? '' : ' (not cut)'}`,
    );
    expect
      .soft(inWindow.length, `downloads in ${WINDOW_MS} ms: ${perRequest.join(', ')}`)
      .toBeLessThanOrEqual(6);
    expect
      .soft(Math.max(...inWindow.map((r) => r.bytes)), `bytes written per download: ${perRequest.join(', ')}`)
      .toBeLessThanOrEqual(MAX_BYTES_PER_REQUEST);
    expect
      .soft(
        inWindow.every((r) => r.endedAt !== undefined && r.cutShort),
        'every download cut short by the daemon',
      )
      .toBe(true);
    const gaps = inWindow.slice(1).map((r, i) => r.startedAt - inWindow[i]!.startedAt);
    expect
      .soft(Math.min(...gaps, Number.POSITIVE_INFINITY), `ms between downloads: ${gaps.join(', ')}`)
      .toBeGreaterThanOrEqual(200);
    // Each download is one failed poll: the client does not retry a refusal by itself.
    const failures = run.pollFailures();
    expect.soft(downloads().length, 'downloads vs failed polls').toBeLessThanOrEqual(failures.length + 1);

    const refused = failures.find((l) => String(l.err).includes('refused GET'));
    expect(
      refused,
      `a refusal among the failed polls: ${String(failures[0]?.err).slice(0, 300)}`,
    ).toBeDefined();
    expectRefusalText(String(refused!.err), upstream.url(inWindow[0]!.url), NAMES_BYTE_LIMIT);
    expect
      .soft(await metricOr(run, 'feedsync_upstream_refusals_total', { reason: 'body_too_large' }))
      .toBeGreaterThanOrEqual(1);
    expect
      .soft(await metricOr(run, 'feedsync_polls_total', { outcome: 'error' }))
      .toBeGreaterThanOrEqual(inWindow.length - 1);
    expect(run.changes(), 'nothing delivered from the endless page').toEqual([]);
  } finally {
    expectHealthy(run, await run.finish(), { foreign: [foreign] });
  }
});

it('16 subjects of 60 MB each (subject_concurrency 8): refused body_too_large, ≤ 8 in flight, RSS ≤ 256 MB, then delivered', async () => {
  const feed = new Feed('workflow', makeEvents('workflow', 201, 16, { subjects: 16, subjectBase: 601 }));
  const subjectPaths = new Set(feed.events.map((e) => e.subject));
  const upstream = await servers.start({
    name: 'upstream',
    handler: (ctx) => {
      if (ctx.mode !== 'hostile' || !subjectPaths.has(ctx.path)) return healthyReply(ctx, feed);
      const id = ctx.path.split('/').pop();
      return {
        status: 200,
        headers: { 'content-type': JSON_TYPE },
        stream: lazyBody(`{"resource_type":"job","id":${id},"name":"`, 'x', 60_000_000, '"}'),
      };
    },
  });
  const foreign = await servers.foreign();
  const run = await startRun({
    service: 'workflow',
    upstream,
    source: { subject_concurrency: 8 },
    label: 'subjects-16x60MB',
  });
  let changes;
  try {
    const failure = await run.waitForPollFailure(
      (e) => e.includes('refused GET'),
      15_000,
      'a refused subject',
    );
    const err = String(failure.err);
    const named = [...subjectPaths].map((p) => upstream.url(p)).find((u) => err.includes(`refused GET ${u}`));
    expect(named, `the refusal names one of the subject URLs: ${err.slice(0, 300)}`).toBeDefined();
    expectRefusalText(err, named!, NAMES_BYTE_LIMIT);
    expect
      .soft(await metricOr(run, 'feedsync_upstream_refusals_total', { reason: 'body_too_large' }))
      .toBeGreaterThanOrEqual(1);
    expect(run.changes(), 'nothing of the page delivered while its subjects are refused').toEqual([]);

    upstream.heal();
    changes = await run.waitForIds(feed.ids(), 15_000);
  } finally {
    const subjectDownloads = upstream.requests.filter(
      (r) => r.authenticated && r.mode === 'hostile' && subjectPaths.has(r.path),
    );
    expect.soft(subjectDownloads.length, 'hostile subject downloads').toBeGreaterThan(0);
    expect
      .soft(Math.max(0, ...subjectDownloads.map((r) => r.bytes)), 'bytes written for one subject')
      .toBeLessThanOrEqual(MAX_BYTES_PER_REQUEST);
    expect.soft(maxInFlight(subjectDownloads), 'subject downloads in flight at once').toBeLessThanOrEqual(8);
    expectHealthy(run, await run.finish(), { foreign: [foreign] });
  }
  expectDeliveredOnce(changes, feed, run.source);
});
