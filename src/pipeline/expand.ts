import type { Logger } from 'pino';
import { sleep } from '../backoff.js';
import { cut } from '../core/bounded-text.js';
import {
  errorMessage,
  FeedsyncError,
  UNDECODABLE_REASONS,
  UndecodableSubjectError,
  UpstreamAuthError,
  UpstreamRefusedError,
  type UndecodableReason,
} from '../core/errors.js';
import { BodyOverCapError, type UpstreamClient } from '../upstream/client.js';
import type { Resource } from '../core/resource.js';
import type { FeedEvent, SubjectOutcome } from './change.js';
import type { Semaphore } from '../semaphore.js';
import type { PageClaim, Reservation } from './page-bytes.js';

export interface ExpandOptions {
  expandSubject: boolean;
  /** Subject URLs already known to be deleted (they answered 404); updated here. */
  gone: GoneSubjects;
  client: UpstreamClient;
  /** The source's subject GETs in flight (`subject_concurrency`), shared by the pages expanding. */
  limiter: Semaphore;
  signal: AbortSignal;
  logger: Logger;
  /** The wait before the in-page retry of a failing subject fetch (after the client's own attempts). */
  retryDelay: (attempt: number) => number;
  /**
   * Called each time a subject fetch failed again after the client's own attempts: the page waits
   * for it (it is retried on its own, the page is not refetched), but the poll is failing meanwhile.
   */
  onStalled?: (err: SubjectUnavailableError, retryInMs: number) => void;
  /** The page's share of the source's max_page_bytes: each fetch reserves maxBodyBytes of it first. */
  claim: PageClaim;
  maxBodyBytes: number;
  /** The first reservation of a fetch (its share of the budget), capping its body; at most maxBodyBytes. */
  firstBytes: number;
  /** Source name, for the undecodable subject's error. */
  source: string;
  /** A subject that can never be decoded: stop the source on it, or deliver it as `unreadable`. */
  onUndecodable: 'stop' | 'deliver_unreadable';
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
  // One subject that cannot be had fails the page: the others stop too, rather than hold bodies
  // the page budget no longer counts once the page has given its bytes back.
  const failed = new AbortController();
  opts = { ...opts, signal: AbortSignal.any([opts.signal, failed.signal]) };
  const task = async (url: string) => {
    const event = firstEvent.get(url)!;
    const what = `subject of event ${event.id} (${cut(url)})`;
    // The body's bytes are taken from the page budget before asking: first its share of the
    // budget, capping the request there; a larger body is asked for again with room for the
    // largest (max_body_bytes). What the body turned out to be is kept until the page commits.
    let cap: number | undefined = opts.firstBytes < opts.maxBodyBytes ? opts.firstBytes : undefined;
    for (;;) {
      const { reservation, release } = await slotAndBytes(opts, cap ?? opts.maxBodyBytes, what);
      try {
        // Asked again when its turn comes: the page before this one may have found it gone meanwhile.
        const outcome: SubjectOutcome = opts.gone.has(url)
          ? { state: 'gone', subject: null }
          : await fetchSubject(url, event, opts, cap);
        if (outcome.state === 'gone' && !opts.gone.has(url)) {
          notFound++;
          opts.gone.add(url);
        }
        reservation.keep(outcome.bytes ?? 0);
        fetched.set(url, outcome);
        return;
      } catch (err) {
        if (!(err instanceof BodyOverCapError && cap !== undefined)) throw err;
        cap = undefined;
      } finally {
        reservation.cancel();
        release();
      }
    }
  };
  await Promise.all(
    [...toFetch].map((url) =>
      task(url).catch((err: unknown) => {
        failed.abort(err);
        throw err;
      }),
    ),
  );
  return { outcomes: decisions.map((d) => (typeof d === 'string' ? fetched.get(d)! : d)), notFound };
}

/**
 * A subject_concurrency slot and `bytes` of the page budget. A task holding a slot never waits on
 * the budget (a slot is given back only by a fetch that finishes, which must not depend on the
 * budget): without the bytes at once it gives the slot back, waits for the bytes, then for a slot.
 */
async function slotAndBytes(
  opts: ExpandOptions,
  bytes: number,
  what: string,
): Promise<{ reservation: Reservation; release: () => void }> {
  let release = await opts.limiter.acquire();
  const ready = opts.claim.tryReserve(bytes);
  if (ready) return { reservation: ready, release };
  release();
  const reservation = await opts.claim.reserve(bytes, what);
  try {
    release = await opts.limiter.acquire();
  } catch (err) {
    reservation.cancel();
    throw err;
  }
  return { reservation, release };
}

/**
 * A subject that cannot be had whatever the retries (refused by feedsync, 403, another 4xx): the
 * page fails with the event named, so the poller's backoff, `polls_total{outcome="error"}` and
 * readiness show it, instead of an endless retry inside the page that nothing reports.
 */
export class SubjectUnavailableError extends FeedsyncError {
  override name = 'SubjectUnavailableError';
  constructor(event: FeedEvent, cause: FeedsyncError) {
    super(`subject of event ${event.id} (${cut(event.event_type)}): ${cause.message}`, cause.retryable, {
      cause,
    });
  }
}

const UNDECODABLE = new Set<string>(UNDECODABLE_REASONS);

/**
 * A subject that can never be decoded: per the source's on_undecodable_subject, the outcome
 * `unreadable`, delivered with `reason: detail`, or an UndecodableSubjectError that stops the
 * source, saying `what` was refused (naming the subject URL).
 */
export function undecodable(
  opts: Pick<ExpandOptions, 'source' | 'onUndecodable'>,
  event: FeedEvent,
  reason: UndecodableReason,
  detail: string,
  what: string,
): SubjectOutcome {
  if (opts.onUndecodable === 'deliver_unreadable')
    return { state: 'unreadable', subject: null, error: `${reason}: ${cut(detail)}` };
  throw new UndecodableSubjectError(opts.source, event.id, event.event_type, reason, what);
}

/** What a refusal says after `refused GET <url>: ` (its detail, without the URL). */
function refusalDetail(err: UpstreamRefusedError): string {
  const prefix = `refused GET ${err.url}: `;
  return err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.reason;
}

async function fetchSubject(
  url: string,
  event: FeedEvent,
  opts: ExpandOptions,
  cap: number | undefined,
): Promise<SubjectOutcome> {
  for (let attempt = 0; ; attempt++) {
    if (opts.signal.aborted) throw new ExpansionAborted('shutting down');
    try {
      const res = await opts.client.get(url, { kind: 'subject', signal: opts.signal, maxBodyBytes: cap });
      if (res.status !== 200) return { state: 'gone', subject: null };
      return { state: 'present', subject: res.resource as Resource, bytes: res.bytes };
    } catch (err) {
      // Wrong credentials are not fixed by hammering: hand it to the poller's slow retry. A body over
      // this request's cap is asked for again with more room.
      if (err instanceof UpstreamAuthError || err instanceof BodyOverCapError || opts.signal.aborted)
        throw err;
      // Over a decoding limit: asking again gets the same body. The operator's policy decides.
      if (err instanceof UpstreamRefusedError && UNDECODABLE.has(err.reason)) {
        const detail = refusalDetail(err);
        return undecodable(
          opts,
          event,
          err.reason as UndecodableReason,
          detail,
          `refused GET ${cut(err.url)}: ${cut(detail)}`,
        );
      }
      if (err instanceof FeedsyncError && !err.retryable) throw new SubjectUnavailableError(event, err);
      const stalled = new SubjectUnavailableError(
        event,
        err instanceof FeedsyncError ? err : new FeedsyncError(errorMessage(err), true),
      );
      const delay = opts.retryDelay(attempt);
      if (opts.onStalled) opts.onStalled(stalled, delay);
      else
        opts.logger.warn(
          { url: cut(url), attempt: attempt + 1, err: errorMessage(err) },
          'subject fetch failed; retrying',
        );
      if (!(await sleep(delay, opts.signal))) throw new ExpansionAborted('shutting down');
    }
  }
}
