// The limit feedsync is measured against: the sandbox's raw capacity for the very requests feedsync
// makes to drain a feed (the feed pages, with the same newer_than values and expand parameters,
// plus the subject GETs it has to make), issued by a concurrent keep-alive client with the same
// Digest code. A ratio feedsync/raw holds on a noisy machine where absolute rates do not.
import type { FeedEvent } from '../../dist/pipeline/change.js';
import type { SourceConfig } from '../../dist/config/types.js';
import { UpstreamAuthError } from '../../dist/core/errors.js';
import { nextCursor, PAGE_SIZE } from '../../dist/pipeline/cursor.js';
import { readFeedEvents } from '../../dist/pipeline/feed-page.js';
import { mapLimit } from '../../dist/pipeline/map-limit.js';
import { feedUrl } from '../../dist/pipeline/poller.js';
import type { ServiceName } from '../../dist/sandbox/types.js';
import { services } from '../../dist/services/index.js';
import { createUpstreamClient, type UpstreamClient } from '../../dist/upstream/client.js';

export interface PlannedRequest {
  url: string;
  kind: 'feed' | 'subject';
}

export interface RequestPlan {
  service: ServiceName;
  requests: PlannedRequest[];
  /** Events the plan covers (each event once, re-listed ones not counted again). */
  events: number;
  feedPages: number;
  subjectGets: number;
}

export interface RawResult {
  service: ServiceName;
  concurrency: number;
  requests: number;
  events: number;
  seconds: number;
  eventsPerSecond: number;
  requestsPerSecond: number;
  unauthorized: number;
  /** Requests re-sent because the client gave up on a 401 (see the report). */
  authRetries: number;
}

/** The source a bench run uses for a service: JSON, expand subject (and source), from the start. */
export function benchSource(
  service: ServiceName,
  baseUrl: string,
  creds: { username: string; password: string },
  pollIntervalMs: number,
): SourceConfig {
  return {
    name: service,
    service,
    base_url: baseUrl,
    username: creds.username,
    password: creds.password,
    format: 'json',
    event_types: [],
    expand_subject: true,
    expand_source: true,
    start_from: 'earliest',
    max_body_bytes: 8 * 1024 * 1024,
    max_page_bytes: 16 * 1024 * 1024,
    max_change_bytes: 8 * 1024 * 1024,
    on_undecodable_subject: 'stop',
    allowed_origins: [],
    allow_insecure_http: false,
    digest_min: 'md5',
    require_qop: false,
    poll_interval_ms: pollIntervalMs,
    timeout_ms: 30_000,
    subject_concurrency: 8,
    // Loopback: compressing would only cost CPU on both sides.
    compression: false,
  };
}

function clientFor(source: SourceConfig, connections: number): UpstreamClient {
  return createUpstreamClient({
    source: `bench-${source.name}`,
    username: source.username,
    password: source.password,
    format: source.format,
    timeoutMs: source.timeout_ms,
    connections,
    linkRel: services[source.service].linkRel,
    compression: source.compression,
  });
}

/**
 * Walk the feed the way the poller does (same URLs, same cursor rule, same per-page subject
 * decisions as pipeline/expand.ts) and list every request that makes. Untimed: it only plans.
 */
export async function planRequests(source: SourceConfig, maxPages: number): Promise<RequestPlan> {
  const adapter = services[source.service];
  const client = clientFor(source, 1);
  const requests: PlannedRequest[] = [];
  let position = { cursor: 0, seenAbove: [] as number[] };
  let events = 0;
  let feedPages = 0;
  let subjectGets = 0;
  const pages: { url: string; fresh: FeedEvent[] }[] = [];
  try {
    for (let page = 0; page < maxPages; page++) {
      const url = feedUrl(source, adapter, position.cursor, source.event_types);
      const res = await getWithAuthRetry(client, url, 'feed');
      if (res.status !== 200) throw new Error(`feed ${url} answered ${res.status}`);
      const listed = readFeedEvents(res.resource, url);
      const seen = new Set(position.seenAbove);
      pages.push({ url, fresh: listed.filter((e) => e.id > position.cursor && !seen.has(e.id)) });
      position = nextCursor(
        position,
        listed.filter((e) => e.id > position.cursor).map((e) => e.id),
        adapter.maxDisorder,
      );
      if (listed.length < PAGE_SIZE) break;
    }
  } finally {
    await client.close();
  }
  // The backlog is static (rate 0), so a subject with a *_deleted event anywhere answers 404 when
  // fetched; feedsync fetches such a subject once and then remembers it (pipeline/expand.ts), and
  // never fetches one whose delete is on the same page. Plan exactly those requests.
  const deletedSomewhere = new Set(
    pages.flatMap((p) => p.fresh.filter((e) => e.event_type.endsWith('_deleted')).map((e) => e.subject_link)),
  );
  const gone = new Set<string>();
  for (const { url, fresh } of pages) {
    requests.push({ url, kind: 'feed' });
    feedPages++;
    events += fresh.length;
    const deletedHere = new Set(
      fresh.filter((e) => e.event_type.endsWith('_deleted')).map((e) => e.subject_link),
    );
    const toFetch = new Set<string>();
    for (const e of fresh) {
      if (!source.expand_subject || !e.subject_link || e.event_type.endsWith('_deleted') || e.subject)
        continue;
      if (deletedHere.has(e.subject_link) || gone.has(e.subject_link)) continue;
      toFetch.add(e.subject_link);
    }
    for (const subject of toFetch) {
      requests.push({ url: subject, kind: 'subject' });
      if (deletedSomewhere.has(subject)) gone.add(subject);
    }
    subjectGets += toFetch.size;
  }
  return { service: source.service, requests, events, feedPages, subjectGets };
}

/** Issue the planned requests with `concurrency` in flight over keep-alive; events covered / s. */
export async function measureRaw(
  source: SourceConfig,
  plan: RequestPlan,
  concurrency: number,
): Promise<RawResult> {
  const client = clientFor(source, concurrency);
  let authRetries = 0;
  const started = performance.now();
  try {
    await mapLimit(plan.requests, concurrency, async (r) => {
      const res = await getWithAuthRetry(client, r.url, r.kind, () => authRetries++);
      return res.status;
    });
  } finally {
    await client.close().catch(() => undefined);
  }
  const seconds = (performance.now() - started) / 1000;
  const stats = client.stats();
  return {
    service: source.service,
    concurrency,
    requests: stats.requests,
    events: plan.events,
    seconds,
    eventsPerSecond: plan.events / seconds,
    requestsPerSecond: stats.requests / seconds,
    unauthorized: stats.unauthorized,
    authRetries,
  };
}

/**
 * The client gives up with UpstreamAuthError when credentials built on a fresh challenge are
 * refused. Under concurrency the sandbox also refuses digests whose nc arrives out of order; the
 * raw client must still complete every request to be a fair limit, so it re-sends (bounded).
 */
async function getWithAuthRetry(
  client: UpstreamClient,
  url: string,
  kind: 'feed' | 'subject',
  onRetry?: () => void,
): ReturnType<UpstreamClient['get']> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await client.get(url, { kind });
    } catch (err) {
      if (!(err instanceof UpstreamAuthError) || attempt >= 5) throw err;
      onRetry?.();
    }
  }
}
