import type { Logger } from 'pino';
import { backoffDelay, sleep } from '../backoff.js';
import { errorMessage, UpstreamAuthError } from '../errors.js';
import type { UpstreamClient } from '../upstream/client.js';
import type { Resource } from '../upstream/resource.js';
import type { FeedEvent, SubjectOutcome } from './change.js';
import { mapLimit } from './map-limit.js';

export interface ExpandOptions {
  expandSubject: boolean;
  client: UpstreamClient;
  concurrency: number;
  signal: AbortSignal;
  logger: Logger;
  retry: { baseMs: number; maxMs: number };
}

/** Thrown when expansion is interrupted by shutdown: the page is simply not committed. */
export class ExpansionAborted extends Error {}

/**
 * Decide each event's subject: embedded by the feed, fetched by its link (each distinct URL once
 * per page, at most `concurrency` in flight), `gone` on 404, `deleted` for *_deleted events,
 * `skipped` when expansion is off. A failing fetch is retried on its own until it succeeds; the
 * page waits for it rather than being refetched.
 */
export async function expandSubjects(events: FeedEvent[], opts: ExpandOptions): Promise<SubjectOutcome[]> {
  const toFetch = new Set<string>();
  const decide = (e: FeedEvent): SubjectOutcome | string => {
    if (!opts.expandSubject || !e.subject_link) return { state: 'skipped', subject: null };
    if (e.event_type.endsWith('_deleted')) return { state: 'deleted', subject: null };
    if (e.subject) return { state: 'present', subject: e.subject };
    return e.subject_link;
  };
  const decisions = events.map(decide);
  for (const d of decisions) if (typeof d === 'string') toFetch.add(d);

  const fetched = new Map<string, SubjectOutcome>();
  await mapLimit([...toFetch], opts.concurrency, async (url) => {
    fetched.set(url, await fetchSubject(url, opts));
  });
  return decisions.map((d) => (typeof d === 'string' ? fetched.get(d)! : d));
}

async function fetchSubject(url: string, opts: ExpandOptions): Promise<SubjectOutcome> {
  for (let attempt = 0; ; attempt++) {
    if (opts.signal.aborted) throw new ExpansionAborted('shutting down');
    try {
      const res = await opts.client.get(url, { kind: 'subject', signal: opts.signal });
      if (res.status === 404) return { state: 'gone', subject: null };
      return { state: 'present', subject: res.resource as Resource };
    } catch (err) {
      // Wrong credentials are not fixed by hammering: hand it to the poller's slow retry.
      if (err instanceof UpstreamAuthError || opts.signal.aborted) throw err;
      const delay = backoffDelay(attempt, opts.retry.baseMs, opts.retry.maxMs);
      opts.logger.warn(
        { url, attempt: attempt + 1, err: errorMessage(err) },
        'subject fetch failed; retrying',
      );
      if (!(await sleep(delay, opts.signal))) throw new ExpansionAborted('shutting down');
    }
  }
}
