// What one source's poller and its feed audit share: their dependencies, the position in the feed,
// the state kept across pages, and the two requests both make (a feed page, a page's subjects).
import type { Logger } from 'pino';
import type { SinkFilter, SourceConfig } from '../config/types.js';
import type { Change } from '../core/change.js';
import type { PipelineEvents } from '../core/events.js';
import type { SourceState } from '../queue/driver.js';
import type { ChangeQueue } from '../queue/queue.js';
import type { ServiceAdapter } from '../services/adapter.js';
import type { UpstreamClient } from '../upstream/client.js';
import { backoffDelay } from '../backoff.js';
import { cut } from '../core/bounded-text.js';
import { changeJson } from '../core/change-json.js';
import { UndecodableSubjectError } from '../core/errors.js';
import { buildChange, type FeedEvent } from './change.js';
import { expandSubjects, undecodable, type Expansion, type GoneSubjects } from './expand.js';
import type { Semaphore } from '../semaphore.js';
import { PageBudgetError, type ByteBudget, type PageClaim } from './page-bytes.js';
import type { RecentIds } from './recent-ids.js';

export interface PollerDeps {
  source: SourceConfig;
  adapter: ServiceAdapter;
  client: UpstreamClient;
  queue: ChangeQueue;
  /** The stored cursor and poll status (the driver's; commitPage moves the cursor). */
  sourceState: SourceState;
  events: PipelineEvents;
  logger: Logger;
  signal: AbortSignal;
  /** How often the feed audit may run (default 60 s; tests shorten it). */
  auditIntervalMs?: number;
  /** Each sink's filter: a catch-up fetches the subjects of only the events its sink takes. */
  sinkFilters?: ReadonlyMap<string, SinkFilter>;
}

export interface Position {
  cursor: number;
  seenAbove: number[];
}

/** What the pages of one source share. */
export interface PageState {
  /** Event types already warned about (at most MAX_LOGGED_UNKNOWN_TYPES). */
  unknownTypes: Set<string>;
  gone: GoneSubjects;
  subjects: Semaphore;
  /** Subject-body bytes in flight and held until commit (max_page_bytes), shared by every page. */
  bytes: ByteBudget;
  /** Ids this process committed: a re-listed one is skipped, an unknown one behind the cursor delivered. */
  recent: RecentIds;
  /** The cursor rule's D: the service's bound, raised to the largest disorder a full page showed. */
  disorder: number;
  /** Events at or below it were excluded by the operator (`start_from`), not missed. */
  floor: number;
  /** A page showed more disorder than the rule assumed: audit at the next caught-up moment. */
  auditSoon: boolean;
}

const ERROR_RETRY_MAX_MS = 60_000;

/**
 * The wait after a failed poll, and after a failed round of a subject retried on its own: both are
 * the source failing to move, so they back off alike, and a short poll interval retries sooner.
 */
export function failedPollDelay(failures: number, pollIntervalMs: number): number {
  return Math.max(200, backoffDelay(failures, Math.min(1000, pollIntervalMs), ERROR_RETRY_MAX_MS));
}

/**
 * Starts the expansion of `events`' subjects within the source's subject budgets: requests in
 * flight (subject_concurrency) and bytes held until commit (`claim`, the page's share of
 * max_page_bytes; the caller releases it when the page commits or fails). A page refused for
 * either limit, or stopped on an undecodable subject, is counted here.
 */
export function expand(
  deps: PollerDeps,
  state: PageState,
  events: FeedEvent[],
  signal: AbortSignal,
  claim: PageClaim,
): Promise<Expansion> {
  return expandSubjects(events, {
    expandSubject: deps.source.expand_subject,
    gone: state.gone,
    client: deps.client,
    limiter: state.subjects,
    signal,
    logger: deps.logger,
    retryDelay: (attempt) => failedPollDelay(attempt, deps.source.poll_interval_ms),
    // A subject that keeps failing is retried on its own, without refetching the page (CONTRACT
    // §6); each failed round still counts as a failed poll, so metrics and /readyz see a source
    // that is stuck on it.
    onStalled: (error, retryInMs) => {
      deps.events.emit('poll:finished', {
        source: deps.source.name,
        ok: false,
        durationSeconds: 0,
        pageSize: 0,
        behind: false,
        error,
      });
      deps.logger.error(
        {
          err: error.message,
          retry_in_ms: Math.round(retryInMs),
          retrying: 'the subject alone; the page is kept',
        },
        'poll failed; cursor not moved',
      );
    },
    claim,
    maxBodyBytes: deps.source.max_body_bytes,
    // A fetch's first share: all subject_concurrency slots busy take half the budget, leaving the
    // other half to bodies held until their page commits (the page read ahead's included).
    firstBytes: Math.min(
      deps.source.max_body_bytes,
      Math.floor(deps.source.max_page_bytes / (2 * deps.source.subject_concurrency)),
    ),
    source: deps.source.name,
    onUndecodable: deps.source.on_undecodable_subject,
  }).catch((err: unknown) => {
    reportPageFailure(deps, err);
    throw err;
  });
}

/** Counts a page refused for a memory limit or stopped on an undecodable subject. */
function reportPageFailure(deps: PollerDeps, err: unknown): void {
  const source = deps.source.name;
  if (err instanceof PageBudgetError) deps.events.emit('page:refused', { source, limit: 'max_page_bytes' });
  if (err instanceof UndecodableSubjectError) {
    if (err.reason === 'max_change_bytes')
      deps.events.emit('page:refused', { source, limit: 'max_change_bytes' });
    deps.events.emit('subject:undecodable', { source, action: 'stopped', count: 1 });
  }
}

export function feedUrl(
  source: SourceConfig,
  adapter: ServiceAdapter,
  newerThan: number | undefined,
  types: string[],
): string {
  const params = new URLSearchParams();
  if (newerThan !== undefined) params.set('newer_than', String(newerThan));
  if (types.length) params.set('event_type', types.join(','));
  for (const [k, v] of Object.entries(adapter.feedParams(source))) params.set(k, v);
  const query = params.toString();
  return `${source.base_url}/api/events${query ? `?${query}` : ''}`;
}

/**
 * Turns expanded events into changes and commits them with the position after them (the same
 * position for late events found by the audit), remembers them as delivered, and reports the commit.
 */
export async function commitEvents(
  deps: PollerDeps,
  state: PageState,
  events: FeedEvent[],
  expansion: Expansion,
  next: Position,
  from: Position = next,
): Promise<{ changes: Change[]; lastEventAt: number | undefined }> {
  const { source, adapter } = deps;
  const changes = buildChanges(deps, events, expansion);
  const unreadable = changes.filter((c) => c.subject_state === 'unreadable').length;
  const enqueued = await deps.queue.commitPage({
    source: source.name,
    changes,
    cursor: next.cursor,
    seenAbove: next.seenAbove,
    from,
  });
  for (const e of events) state.recent.add(e);
  const lastEventAt = newestEventAt(events);
  deps.events.emit('page:committed', {
    source: source.name,
    cursor: next.cursor,
    // Upstream data must not mint metric series: types the specs do not list count as "unknown".
    eventTypes: changes.map((c) => (adapter.knownEventTypes.has(c.event_type) ? c.event_type : 'unknown')),
    lastEventTimestamp: lastEventAt !== undefined ? lastEventAt / 1000 : undefined,
    enqueued,
    // 404 answers, not gone changes: several events may share one gone subject (fetched once),
    // and a subject known to be deleted is not fetched again.
    gone: expansion.notFound,
  });
  if (unreadable) {
    deps.events.emit('subject:undecodable', {
      source: source.name,
      action: 'delivered_unreadable',
      count: unreadable,
    });
    for (const c of changes)
      if (c.subject_state === 'unreadable')
        deps.logger.warn(
          { event_id: c.event_id, subject_url: c.subject_url, subject_error: c.subject_error },
          'subject cannot be decoded; delivered with subject_state "unreadable" (on_undecodable_subject: deliver_unreadable)',
        );
  }
  return { changes, lastEventAt };
}

/**
 * The changes of expanded events, in feed order. A change whose JSON is over max_change_bytes is
 * an undecodable subject (the source's on_undecodable_subject decides); its JSON is computed once
 * here and reused by the queue and the sinks (core/change-json.ts).
 */
export function buildChanges(deps: PollerDeps, events: FeedEvent[], expansion: Expansion): Change[] {
  const { source, adapter } = deps;
  const origin = { source: source.name, service: adapter.kind };
  const changes: Change[] = [];
  try {
    events.forEach((e, i) => {
      let change = buildChange(origin, e, expansion.outcomes[i]!, adapter.normalizeSubject);
      const size = jsonBytes(change);
      if (size > source.max_change_bytes) {
        const detail = `the change is ${size} bytes, over max_change_bytes (${source.max_change_bytes})`;
        const what = `the change of subject ${cut(e.subject_link ?? '(none)')} is ${size} bytes, over max_change_bytes (${source.max_change_bytes})`;
        const policy = { source: source.name, onUndecodable: source.on_undecodable_subject };
        change = buildChange(
          origin,
          e,
          undecodable(policy, e, 'max_change_bytes', detail, what),
          adapter.normalizeSubject,
        );
        // Without its subject it is still too big (a huge embedded rule): nothing can deliver it.
        if (jsonBytes(change) > source.max_change_bytes)
          throw new UndecodableSubjectError(
            source.name,
            e.id,
            e.event_type,
            'max_change_bytes',
            `${what}, and still ${jsonBytes(change)} bytes without its subject`,
          );
      }
      changes.push(change);
    });
  } catch (err) {
    reportPageFailure(deps, err);
    throw err;
  }
  return changes;
}

/**
 * UTF-8 length of a change's JSON, exact once it could pass max_change_bytes (at least 64 KiB): a
 * UTF-16 code unit is at most 3 UTF-8 bytes, so most changes need no count.
 */
function jsonBytes(change: Change): number {
  const text = changeJson(change);
  return text.length * 3 <= 65536 ? text.length : Buffer.byteLength(text);
}

/** epoch ms of the newest event (undefined for none). */
export function newestEventAt(events: FeedEvent[]): number | undefined {
  return events.length ? Math.max(...events.map((e) => Date.parse(e.timestamp))) : undefined;
}
