// A server (or anything on the path) that offers only a weak Digest mode (issue #28 item 5): only
// MD5, or only the RFC 2069 form without qop, to a source whose digest_min / require_qop demand
// more. The real daemon must refuse to answer (no Authorization is ever sent), fail the poll with an
// error naming the source, what was offered and the key to change, count it
// (feedsync_upstream_refusals_total{reason="weak_digest"}), retry at the pace of a 401, and deliver
// once the server offers what the source accepts. The challenges come from the sandbox's Digest
// server (src/sandbox/digest-auth.ts), configured per scenario.
import { afterEach, expect, it } from 'vitest';
import { DigestGuard, type DigestSettings } from '../../src/sandbox/digest-auth.js';
import { killAllCli } from '../support/process.js';
import {
  expectDeliveredOnce,
  expectHealthy,
  Feed,
  healthyReply,
  makeEvents,
  metricOr,
  PASSWORD,
  Servers,
  sleep,
  startRun,
  USERNAME,
} from './support.js';

const servers = new Servers();
afterEach(async () => {
  await killAllCli();
  await servers.closeAll();
});

const POLL_INTERVAL_MS = 500;
const OBSERVE_MS = 3000;

const base: DigestSettings = {
  digestAlgorithms: ['MD5'],
  digestChallenges: 'headers',
  digestQop: 'auth',
  digestOpaque: true,
  digestAlgorithmParam: true,
  digestDomain: false,
  digestNextnonce: false,
  nonceTtlMs: 10 * 60_000,
  nonceMaxUses: 0,
};

it.each([
  {
    name: 'only MD5, the source demands SHA-256',
    weak: { digestAlgorithms: ['MD5'] },
    source: { digest_min: 'sha-256' },
    offered: 'MD5 with qop=auth',
    key: 'digest_min: md5',
    strong: /algorithm=SHA-256\b/,
  },
  {
    name: 'only the no-qop form, the source demands qop',
    weak: { digestAlgorithms: ['MD5', 'SHA-256'], digestQop: 'none' },
    source: { require_qop: true },
    offered: 'MD5 without qop, SHA-256 without qop',
    key: 'require_qop: false',
    strong: /qop=auth\b/,
  },
] as const)(
  'a server offering $name: never answered, named, counted, paced; healed → delivered',
  async (s) => {
    const settings: DigestSettings = { ...base, ...s.weak, digestAlgorithms: [...s.weak.digestAlgorithms] };
    const feed = new Feed('scheduling', makeEvents('scheduling', 2201, 8));
    const upstream = await servers.start({ name: 'upstream', handler: (ctx) => healthyReply(ctx, feed) });
    const guard = new DigestGuard({
      realm: 'floor@feedsync-hostile',
      domain: '/',
      username: USERNAME,
      password: PASSWORD,
      settings: () => settings,
    });
    const authorizations: string[] = [];
    // The sandbox's guard decides every request; a verified one gets the healthy feed.
    upstream.authOverride = (ctx) => {
      const authorization = ctx.req.headers.authorization;
      if (authorization !== undefined) authorizations.push(authorization);
      const verdict = guard.verify('GET', ctx.req.url ?? '/', authorization);
      if (verdict.ok) return healthyReply(ctx, feed);
      return {
        status: 401,
        headers: { 'www-authenticate': guard.challenge(verdict.stale), 'content-type': 'text/plain' },
        body: 'unauthorized',
      };
    };
    const foreign = await servers.foreign();
    const run = await startRun({
      service: 'scheduling',
      upstream,
      source: { poll_interval_ms: POLL_INTERVAL_MS, ...s.source },
      label: `digest-floor-${s.key}`,
    });
    let changes;
    try {
      const first = await run.waitForPollFailure((e) => e.includes(upstream.origin), 10_000, 'a refused 401');
      expect(String(first.err)).toBe(
        `authentication failed on GET ${upstream.url('/api/events?newer_than=0&expand=subject%2Csource')}: ` +
          `source scheduling refuses the 401's challenges: the server offers only ${s.offered}, ` +
          `weaker than the source accepts (digest_min: ${'digest_min' in s.source ? 'sha-256' : 'md5'}, ` +
          `require_qop: ${'require_qop' in s.source}); ` +
          `only if nothing on the path can alter the challenge, set ${s.key} on the source`,
      );
      const countBefore = upstream.requests.length;
      const pollsBefore = run.pollFailures().length;
      await sleep(OBSERVE_MS);
      const polls = run.pollFailures().length - pollsBefore;
      const requests = upstream.requests.length - countBefore;
      // It keeps trying, at most once per poll interval, one request per poll (nothing to re-answer).
      expect(polls, 'failed polls while observed').toBeGreaterThanOrEqual(2);
      expect(polls, 'failed polls while observed').toBeLessThanOrEqual(
        Math.ceil(OBSERVE_MS / POLL_INTERVAL_MS) + 2,
      );
      expect(requests, `requests for ${polls} failed polls`).toBeLessThanOrEqual(polls + 1);
      // Nothing was ever answered with the weak mode.
      expect(authorizations).toEqual([]);
      expect(
        await metricOr(run, 'feedsync_upstream_refusals_total', { reason: 'weak_digest' }),
      ).toBeGreaterThanOrEqual(polls);

      // The server now offers what the source accepts, beside the weak mode.
      settings.digestAlgorithms = ['MD5', 'SHA-256'];
      settings.digestQop = 'auth';
      changes = await run.waitForIds(feed.ids(), 25_000);
      expect(authorizations.length).toBeGreaterThan(0);
      for (const a of authorizations) expect(a).toMatch(s.strong);
    } finally {
      expectHealthy(run, await run.finish(), { foreign: [foreign] });
    }
    expectDeliveredOnce(changes, feed, run.source);
  },
);
