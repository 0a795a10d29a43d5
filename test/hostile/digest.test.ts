// Digest edge cases from a hostile server (issue #19 item 6, scenario 14): challenges that can never
// be satisfied (stale=true for ever, only an unknown algorithm, only Basic). feedsync must fail the
// poll clearly (the URL and what is wrong), keep trying at a measured pace rather than hammering,
// never send the password, and recover when the server does.
import { randomBytes } from 'node:crypto';
import { afterEach, expect, it } from 'vitest';
import { killAllCli } from '../support/process.js';
import {
  expectDeliveredOnce,
  expectHealthy,
  Feed,
  healthyReply,
  makeEvents,
  PASSWORD,
  Servers,
  sleep,
  startRun,
  type Reply,
} from './support.js';

const servers = new Servers();
afterEach(async () => {
  await killAllCli();
  await servers.closeAll();
});

const POLL_INTERVAL_MS = 500;
const OBSERVE_MS = 3000;
/** The client answers a challenge at most this many times per request (src/upstream/client.ts). */
const MAX_REQUESTS_PER_POLL = 3;

const unauthorized = (challenge: string): Reply => ({
  status: 401,
  headers: { 'www-authenticate': challenge, 'content-type': 'text/plain' },
  body: 'unauthorized',
});

it.each([
  [
    'stale=true for ever',
    () =>
      `Digest realm="hostile", qop="auth", algorithm=MD5, nonce="${randomBytes(8).toString('hex')}", opaque="o", stale=true`,
    /stale|rejected|authentication/i,
  ],
  [
    'only an unknown algorithm',
    () => 'Digest realm="hostile", qop="auth", algorithm=SHA-512-FANCY, nonce="abc"',
    /algorithm/i,
  ],
  ['only Basic', () => 'Basic realm="hostile"', /digest|basic/i],
])(
  'a server offering %s: the poll fails clearly, paced; healed → delivered',
  async (name, challenge, detail) => {
    const feed = new Feed('scheduling', makeEvents('scheduling', 1501, 8));
    const upstream = await servers.start({ name: 'upstream', handler: (ctx) => healthyReply(ctx, feed) });
    upstream.authOverride = (ctx) => (ctx.mode === 'hostile' ? unauthorized(challenge()) : undefined);
    const foreign = await servers.foreign();
    const run = await startRun({
      service: 'scheduling',
      upstream,
      source: { poll_interval_ms: POLL_INTERVAL_MS },
      label: `digest-${name}`,
    });
    let changes;
    try {
      const first = await run.waitForPollFailure((e) => e.includes(upstream.origin), 10_000, 'a failed poll');
      const err = String(first.err);
      expect(err).toContain(`GET ${upstream.url('/api/events')}`);
      expect(err).toMatch(detail);
      expect(err).not.toContain(PASSWORD);
      const startedAt = Date.now();
      const countBefore = upstream.requests.length;
      await sleep(OBSERVE_MS);
      const polls = run.pollFailures().length;
      const requests = upstream.requests.length;
      // It keeps trying …
      expect(polls, 'failed polls so far').toBeGreaterThanOrEqual(2);
      // … at most once per poll interval …
      expect(polls, `failed polls within ${Date.now() - startedAt + 2000} ms`).toBeLessThanOrEqual(
        Math.ceil(OBSERVE_MS / POLL_INTERVAL_MS) + 4,
      );
      // … with a bounded number of requests per poll.
      expect(
        requests,
        `requests (${countBefore} before the pause) for ${polls} failed polls`,
      ).toBeLessThanOrEqual(MAX_REQUESTS_PER_POLL * (polls + 1));
      // Nothing that could be a credential went to a server that never issued a usable challenge.
      const sent = upstream.requests.filter((r) => r.authorization).length;
      if (name !== 'stale=true for ever') expect(sent, 'requests with an Authorization header').toBe(0);

      upstream.heal();
      changes = await run.waitForIds(feed.ids(), 25_000);
    } finally {
      expectHealthy(run, await run.finish(), { foreign: [foreign] });
    }
    expectDeliveredOnce(changes, feed, run.source);
  },
);
