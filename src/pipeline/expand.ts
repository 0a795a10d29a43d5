import type { Logger } from 'pino';
import { backoffDelay, sleep } from '../backoff.js';
import { cut } from '../core/bounded-text.js';
import { errorMessage, FeedsyncError, UpstreamAuthError } from '../core/errors.js';
import type { UpstreamClient } from '../upstream/client.js';
import type { Resource } from '../core/resource.js';
import type { FeedEvent, SubjectOutcome } from './change.js';
import type { Semaphore } from '../semaphore.js';

export interface ExpandOptions {
  expandSubject: boolean;
  /** Subject URLs already known to be deleted (they answered 404); updated here. */
  gone: GoneSubjects;
  client: UpstreamClient;
  /** The source's subject GETs in flight (`subject_concurrency`), shared by the pages expanding. */
  limiter: Semaphore;
  signal: AbortSignal;
  logger: Logger;
  /** The in-page retry of a failing subject fetch (after the client's own attempts). */
  retry: { baseMs: number; maxMs: number };
  /**
   * Called each time a subject fetch failed again after the client's own attempts: the page waits
   * for it (it is retried on its own, the page is not refetched), but the poll is failing meanwhile.
   */
  onStalled?: (err: unknown) => void;
}

/**
 * Subject URLs known to be deleted upstream. A deleted resource never comes back at its URL, so
 * the later events of a subject that answered 404 need no fetch of their own. Bounded: the oldest
 * are forgotten first (forgetting only costs a fetch).
 */
export class GoneSubjects {
  private readonly urls = new Set<string>();
  constructor(private readonly capacity = 10_000) {}
  has(url: string): boolean {
    return this.urls.has(url);
  }
  add(url: string): void {
    if (this.urls.has(url)) return;
    this.urls.add(url);
    if (this.urls.size > this.capacity) this.urls.delete(this.urls.values().next().value!);
  }
}

export interface Expansion {
  outcomes: SubjectOutcome[];
  /** Distinct subject URLs that answered 404 in this page. */
  notFound: number;
}

/** Thrown when expansion is interrupted by shutdown: the page is simply not committed. */
export class ExpansionAborted extends Error {}

/**
 * Decide each event's subject: embedded by the feed, fetched by its link (each distinct URL once
 * per page, at most `concurrency` in flight), `gone` on 404, `deleted` for *_deleted events,
 * `skipped` when expansion is off. A fetch that still fails after the client's retries fails the
 * page (SubjectUnavailableError): the poller retries it with its backoff, as any failing page.
 */
export async function expandSubjects(events: FeedEvent[], opts: ExpandOptions): Promise<Expansion> {
  const toFetch = new Set<string>();
  // A subject whose *_deleted event is on this page is gone: a GET could only answer 404.
  const deletedHere = new Set(
    events.filter((e) => e.event_type.endsWith('_deleted')).map((e) => e.subject_link),
  );
  const decide = (e: FeedEvent): SubjectOutcome | string => {
    if (!opts.expandSubject || !e.subject_link) return { state: 'skipped', subject: null };
    if (e.event_type.endsWith('_deleted')) return { state: 'deleted', subject: null };
    if (e.subject) return { state: 'present', subject: e.subject };
    if (deletedHere.has(e.subject_link) || opts.gone.has(e.subject_link))
      return { state: 'gone', subject: null };
    return e.subject_link;
  };
  const decisions = events.map(decide);
  // The first event of each URL fetched: named when its subject cannot be had.
  const firstEvent = new Map<string, FeedEvent>();
  decisions.forEach((d, i) => {
    if (typeof d !== 'string') return;
    toFetch.add(d);
    if (!firstEvent.has(d)) firstEvent.set(d, events[i]!);
  });

  const fetched = new Map<string, SubjectOutcome>();
  let notFound = 0;
  await Promise.all(
    [...toFetch].map((url) =>
      opts.limiter.run(async () => {
        // Asked again when its turn comes: the page before this one may have found it gone meanwhile.
        if (opts.gone.has(url)) {
          fetched.set(url, { state: 'gone', subject: null });
          return;
        }
        const outcome = await fetchSubject(url, firstEvent.get(url)!, opts);
        if (outcome.state === 'gone') {
          notFound++;
          opts.gone.add(url);
        }
        fetched.set(url, outcome);
      }),
    ),
  );
  return { outcomes: decisions.map((d) => (typeof d === 'string' ? fetched.get(d)! : d)), notFound };
}

/**
 * A subject that could not be had (refused by feedsync, 403, another 4xx, or still failing after the
 * client's own retries: 5xx, timeouts, undecodable bodies): the page fails with the event named, so
 * the poller's backoff, `polls_total{outcome="error"}` and readiness show it, as for a failing feed
 * page, instead of an endless retry inside the page that nothing reports. `retryable` is the
 * cause's: whether asking again later may succeed.
 */
export class SubjectUnavailableError extends FeedsyncError {
  override name = 'SubjectUnavailableError';
  constructor(event: FeedEvent, cause: FeedsyncError) {
    super(`subject of event ${event.id} (${cut(event.event_type)}): ${cause.message}`, cause.retryable, {
      cause,
    });
  }
}

async function fetchSubject(url: string, event: FeedEvent, opts: ExpandOptions): Promise<SubjectOutcome> {
  for (let attempt = 0; ; attempt++) {
    if (opts.signal.aborted) throw new ExpansionAborted('shutting down');
    try {
      const res = await opts.client.get(url, { kind: 'subject', signal: opts.signal });
      if (res.status !== 200) return { state: 'gone', subject: null };
      return { state: 'present', subject: res.resource as Resource };
    } catch (err) {
      // Wrong credentials are not fixed by hammering: hand it to the poller's slow retry.
      if (err instanceof UpstreamAuthError || opts.signal.aborted) throw err;
      if (err instanceof FeedsyncError && !err.retryable) throw new SubjectUnavailableError(event, err);
      opts.onStalled?.(
        new SubjectUnavailableError(
          event,
          err instanceof FeedsyncError ? err : new FeedsyncError(errorMessage(err), true),
        ),
      );
      const delay = backoffDelay(attempt, opts.retry.baseMs, opts.retry.maxMs);
      opts.logger.warn(
        { url: cut(url), attempt: attempt + 1, err: errorMessage(err) },
        'subject fetch failed; retrying',
      );
      if (!(await sleep(delay, opts.signal))) throw new ExpansionAborted('shutting down');
    }
  }
}
