// Hostile feed bodies too big to hold (issue #19 item 6, scenarios 1–3): a gzip bomb inflating to
// 255 MiB, a small bomb inflating to 10 MiB, plain pages of 2, 10 and 20 MB of `{}` objects. Each
// page is refused (body_too_large, or too_many_values for a page under the byte limit) without
// the daemon's RSS passing 256 MB or /healthz stalling; the cursor stays; once the server serves
// a normal page every event arrives exactly once.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { killAllCli } from '../support/process.js';
import {
  emptyObjectsPage,
  expectCursorUnmoved,
  expectDeliveredOnce,
  expectHealthy,
  expectRefusalText,
  Feed,
  gzipBomb,
  healthyReply,
  isFeed,
  jsonReply,
  makeEvents,
  metricOr,
  MiB,
  Servers,
  startRun,
  type Reply,
} from './support.js';

const servers = new Servers();
afterEach(async () => {
  await killAllCli();
  await servers.closeAll();
});

/** The detail of a body_too_large refusal names the limit (8 MiB = 8388608 bytes). */
const NAMES_BYTE_LIMIT = /8388608|8 ?MiB|max_body_bytes/;

async function refusedFeedPage(
  label: string,
  hostile: Reply,
  reason: 'body_too_large' | 'too_many_values',
  detail: RegExp,
): Promise<void> {
  const feed = new Feed('scheduling', makeEvents('scheduling', 101, 20));
  const upstream = await servers.start({
    name: 'upstream',
    handler: (ctx) => (ctx.mode === 'hostile' && isFeed(ctx) ? hostile : healthyReply(ctx, feed)),
  });
  const foreign = await servers.foreign();
  const run = await startRun({ service: 'scheduling', upstream, label });
  let changes;
  try {
    const failure = await run.waitForPollFailure(
      (e) => e.includes('refused GET'),
      10_000,
      'a refused feed page',
    );
    const url = upstream.url(upstream.feedRequests()[0]!.url);
    expectRefusalText(String(failure.err), url, detail);
    expect(failure.source).toBe('scheduling');
    await expectCursorUnmoved(run, upstream, 0, feed.ids());
    expect
      .soft(
        await metricOr(run, 'feedsync_upstream_refusals_total', { reason }),
        `refusals{reason="${reason}"}`,
      )
      .toBeGreaterThanOrEqual(1);
    expect
      .soft(await metricOr(run, 'feedsync_polls_total', { outcome: 'error' }), 'polls{outcome="error"}')
      .toBeGreaterThanOrEqual(1);

    upstream.heal();
    changes = await run.waitForIds(feed.ids(), 10_000);
  } finally {
    expectHealthy(run, await run.finish(), { foreign: [foreign] });
  }
  expectDeliveredOnce(changes, feed, run.source);
}

describe('compressed bombs', () => {
  let bomb255: Buffer;
  let bomb10: Buffer;
  beforeAll(async () => {
    bomb255 = await gzipBomb(255 * MiB);
    bomb10 = await gzipBomb(10 * MiB);
  });
  afterAll(() => {
    bomb255 = Buffer.alloc(0);
  });

  it('a 260 KB gzip body inflating to a 255 MiB page is refused (body_too_large), RSS ≤ 256 MB, then delivered', async () => {
    expect(bomb255.length).toBeLessThan(300_000);
    await refusedFeedPage(
      'gzip-255MiB',
      jsonReply(bomb255, { 'content-encoding': 'gzip' }),
      'body_too_large',
      NAMES_BYTE_LIMIT,
    );
  });

  it('a 10 KB gzip body inflating to a 10 MiB page is refused (body_too_large), then delivered', async () => {
    expect(bomb10.length).toBeLessThan(15_000);
    await refusedFeedPage(
      'gzip-10MiB',
      jsonReply(bomb10, { 'content-encoding': 'gzip' }),
      'body_too_large',
      NAMES_BYTE_LIMIT,
    );
  });
});

describe('plain pages of {} objects', () => {
  it('2 MB (under max_body_bytes): refused as too_many_values, then delivered', async () => {
    await refusedFeedPage(
      'plain-2MB',
      jsonReply(emptyObjectsPage(2_000_000)),
      'too_many_values',
      /more than \d+|limit|values?/i,
    );
  });

  it('10 MB: refused as body_too_large, then delivered', async () => {
    await refusedFeedPage(
      'plain-10MB',
      jsonReply(emptyObjectsPage(10_000_000)),
      'body_too_large',
      NAMES_BYTE_LIMIT,
    );
  });

  it('20 MB: refused as body_too_large, then delivered', async () => {
    await refusedFeedPage(
      'plain-20MB',
      jsonReply(emptyObjectsPage(20_000_000)),
      'body_too_large',
      NAMES_BYTE_LIMIT,
    );
  });
});
