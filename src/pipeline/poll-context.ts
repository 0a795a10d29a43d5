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
import { buildChange, type FeedEvent } from './change.js';
import { expandSubjects, type Expansion, type GoneSubjects } from './expand.js';
import type { Semaphore } from '../semaphore.js';
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
  /** Ids this process committed: a re-listed one is skipped, an unknown one behind the cursor delivered. */
  recent: RecentIds;
  /** The cursor rule's D: the service's bound, raised to the largest disorder a full page showed. */
  disorder: number;
  /** Events at or below it were excluded by the operator (`start_from`), not missed. */
  floor: number;
  /** A page showed more disorder than the rule assumed: audit at the next caught-up moment. */
  auditSoon: boolean;
}

/** Starts the expansion of `events`' subjects within the source's subject budget. */
export function expand(deps: PollerDeps, state: PageState, events: FeedEvent[], signal: AbortSignal) {
  return expandSubjects(events, {
    expandSubject: deps.source.expand_subject,
    gone: state.gone,
    client: deps.client,
    limiter: state.subjects,
    signal,
    logger: deps.logger,
    retry: { baseMs: 500, maxMs: 30_000 },
  });
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
  const enqueued = await deps.queue.commitPage({
    source: source.name,
    changes,
    cursor: next.cursor,
    seenAbove: next.seenAbove,
    from,
  });
  for (const e of events) state.recent.add(e.id);
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
  return { changes, lastEventAt };
}

/** The changes of expanded events, in feed order. */
export function buildChanges(deps: PollerDeps, events: FeedEvent[], expansion: Expansion): Change[] {
  const { source, adapter } = deps;
  return events.map((e, i) =>
    buildChange(
      { source: source.name, service: adapter.kind },
      e,
      expansion.outcomes[i]!,
      adapter.normalizeSubject,
    ),
  );
}

/** epoch ms of the newest event (undefined for none). */
export function newestEventAt(events: FeedEvent[]): number | undefined {
  return events.length ? Math.max(...events.map((e) => Date.parse(e.timestamp))) : undefined;
}
