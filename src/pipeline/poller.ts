import type { Logger } from 'pino';
import { backoffDelay, sleep } from '../backoff.js';
import type { SourceConfig } from '../config/types.js';
import { errorMessage, UpstreamAuthError } from '../core/errors.js';
import type { PollOutcome, SourceState } from '../queue/driver.js';
import type { ChangeQueue } from '../queue/queue.js';
import type { ServiceAdapter } from '../services/adapter.js';
import type { UpstreamClient } from '../upstream/client.js';
import { buildChange, type FeedEvent } from './change.js';
import { nextCursor, observedDisorder, PAGE_SIZE } from './cursor.js';
import type { PipelineEvents } from '../core/events.js';
import { ExpansionAborted, expandSubjects, GoneSubjects, type Expansion } from './expand.js';
import { Limiter } from './limiter.js';
import { readFeedEvents } from './feed-page.js';

export interface PollerDeps {
  source: SourceConfig;
  adapter: ServiceAdapter;
  client: UpstreamClient;
  queue: ChangeQueue;
  /** The stored cursor and poll status (the driver's; commitPage moves the cursor). */
  sourceState: SourceState;
  events: PipelineEvents;
  logger: Logger;
  /** Pause polling while a sink has more undelivered changes than this. */
  maxBacklog: number;
  signal: AbortSignal;
}

const AUTH_RETRY_MAX_MS = 5 * 60_000;
const ERROR_RETRY_MAX_MS = 60_000;

/**
 * One source's loop: read a page after the cursor, expand its subjects, queue its changes and the
 * new cursor together, repeat at once while pages are full, else wait `poll_interval_ms`. A page
 * that fails anywhere is retried with backoff and the cursor stays where it was.
 */
export async function runPoller(deps: PollerDeps): Promise<void> {
  const { source, signal, logger } = deps;
  const state: PageState = {
    unknownTypes: new Set<string>(),
    gone: new GoneSubjects(),
    subjects: new Limiter(source.subject_concurrency),
  };
  let failures = 0;
  let position: Position | undefined;
  let ahead: ReadAhead | undefined;

  while (!signal.aborted) {
    const started = performance.now();
    try {
      if ((await deps.queue.maxBacklog()) > deps.maxBacklog) {
        logger.warn(
          { max_backlog: deps.maxBacklog },
          'a sink backlog is over queue.max_backlog; polling paused',
        );
        await sleep(source.poll_interval_ms, signal);
        continue;
      }
      position ??= await startPosition(deps);
      const result = await pollOnce(deps, state, position, ahead);
      position = result.position;
      ahead = result.ahead;
      failures = 0;
      const durationSeconds = (performance.now() - started) / 1000;
      deps.events.emit('poll:finished', {
        source: source.name,
        ok: true,
        durationSeconds,
        pageSize: result.pageSize,
        behind: result.full,
      });
      await recordPoll(deps, { ok: true, behind: result.full, lastEventAt: result.lastEventAt });
      if (!result.full) await sleep(source.poll_interval_ms, signal);
    } catch (err) {
      ahead?.abort();
      ahead = undefined;
      if (signal.aborted && (err instanceof ExpansionAborted || isAbort(err))) break;
      failures++;
      const durationSeconds = (performance.now() - started) / 1000;
      deps.events.emit('poll:finished', {
        source: source.name,
        ok: false,
        durationSeconds,
        pageSize: 0,
        behind: false,
        error: err,
      });
      await recordPoll(deps, { ok: false, behind: false, error: errorMessage(err) });
      // Wrong credentials: at most once per poll interval, backing off to minutes; never a tight loop.
      const delay =
        err instanceof UpstreamAuthError
          ? Math.max(
              source.poll_interval_ms,
              backoffDelay(failures, source.poll_interval_ms, AUTH_RETRY_MAX_MS),
            )
          : Math.max(
              200,
              backoffDelay(failures, Math.min(1000, source.poll_interval_ms), ERROR_RETRY_MAX_MS),
            );
      logger.error(
        { err: errorMessage(err), failures, retry_in_ms: Math.round(delay) },
        'poll failed; cursor not moved',
      );
      await sleep(delay, signal);
    }
  }
  ahead?.abort();
}

/** The outcome is for `status` and /readyz only: failing to record it (Redis briefly away) must not fail the poll. */
async function recordPoll(deps: PollerDeps, outcome: PollOutcome): Promise<void> {
  try {
    await deps.sourceState.recordPoll(deps.source.name, outcome);
  } catch (err) {
    deps.logger.warn({ err: errorMessage(err) }, 'cannot record the poll outcome for status');
  }
}

function isAbort(err: unknown): boolean {
  return (
    err instanceof Error && (err.name === 'AbortError' || (err as { code?: string }).code === 'ABORT_ERR')
  );
}

interface Position {
  cursor: number;
  seenAbove: number[];
}

/** What the pages of one source share. */
interface PageState {
  /** Event types already warned about. */
  unknownTypes: Set<string>;
  gone: GoneSubjects;
  subjects: Limiter;
}

/** A feed page read after a position, its subjects expanding. */
interface PageRead {
  url: string;
  /** Events listed, including those already queued. */
  size: number;
  /** The events to turn into changes, in feed order. */
  fresh: FeedEvent[];
  next: Position;
  full: boolean;
  expansion: Promise<Expansion>;
}

/**
 * While catching up, the next page is read and its subjects fetched during this one's expansion and
 * commit: the cursor it needs is known as soon as this page is read. It is committed only after
 * this page (in order), and dropped, its requests aborted, if this page fails.
 */
interface ReadAhead {
  url: string;
  page: Promise<PageRead>;
  abort(): void;
}

interface PollResult {
  position: Position;
  ahead?: ReadAhead;
  pageSize: number;
  full: boolean;
  lastEventAt?: number;
}

async function pollOnce(
  deps: PollerDeps,
  state: PageState,
  position: Position,
  ahead: ReadAhead | undefined,
): Promise<PollResult> {
  const { source, adapter, logger } = deps;
  const url = feedUrl(source, adapter, position.cursor, source.event_types);
  let page: PageRead;
  if (ahead?.url === url) page = await ahead.page;
  else {
    ahead?.abort();
    page = await readPage(deps, state, position, url, deps.signal);
  }
  const next = page.full ? readAhead(deps, state, page.next) : undefined;
  try {
    const { outcomes, notFound } = await page.expansion;
    const changes = page.fresh.map((e, i) =>
      buildChange({ source: source.name, service: adapter.kind }, e, outcomes[i]!, adapter.normalizeSubject),
    );

    const enqueued = await deps.queue.commitPage({
      source: source.name,
      changes,
      cursor: page.next.cursor,
      seenAbove: page.next.seenAbove,
    });

    const lastEventAt = page.fresh.length
      ? Math.max(...page.fresh.map((e) => Date.parse(e.timestamp)))
      : undefined;
    deps.events.emit('page:committed', {
      source: source.name,
      cursor: page.next.cursor,
      eventTypes: changes.map((c) => c.event_type),
      lastEventTimestamp: lastEventAt !== undefined ? lastEventAt / 1000 : undefined,
      enqueued,
      // 404 answers, not gone changes: several events may share one gone subject (fetched once),
      // and a subject known to be deleted is not fetched again.
      gone: notFound,
    });
    if (changes.length) logger.debug({ cursor: page.next.cursor, changes: changes.length }, 'page committed');
    return { position: page.next, pageSize: page.size, full: page.full, lastEventAt, ahead: next };
  } catch (err) {
    next?.abort();
    throw err;
  }
}

function readAhead(deps: PollerDeps, state: PageState, position: Position): ReadAhead {
  const controller = new AbortController();
  const url = feedUrl(deps.source, deps.adapter, position.cursor, deps.source.event_types);
  const page = readPage(deps, state, position, url, AbortSignal.any([deps.signal, controller.signal]));
  // Failures surface when the page is awaited; a page dropped unread must not be an unhandled rejection.
  page.then((p) => p.expansion).catch(() => undefined);
  return { url, page, abort: () => controller.abort() };
}

/** Read the page at `url` (after `position`), pick its fresh events and start their expansion. */
async function readPage(
  deps: PollerDeps,
  state: PageState,
  position: Position,
  url: string,
  signal: AbortSignal,
): Promise<PageRead> {
  const { source, adapter, logger } = deps;
  const res = await deps.client.get(url, { kind: 'feed', signal });
  if (res.status !== 200) throw new Error(`feed ${url} answered ${res.status}: check the source's base_url`);
  const listed = readFeedEvents(res.resource, url);
  const ids = listed.map((e) => e.id);
  const full = listed.length >= PAGE_SIZE;

  if (adapter.maxDisorder > 0 && full && observedDisorder(ids) > adapter.maxDisorder)
    logger.warn(
      { disorder: observedDisorder(ids), bound: adapter.maxDisorder },
      'feed page strays further from id order than the cursor rule assumes',
    );

  // Already queued: at or below the cursor (a misbehaving feed) or re-listed above it (overlap).
  const seen = new Set(position.seenAbove);
  const fresh: FeedEvent[] = [];
  for (const e of listed) {
    if (seen.has(e.id)) continue;
    if (e.id <= position.cursor) {
      logger.warn(
        { event_id: e.id, cursor: position.cursor, url },
        'feed listed an event at or below the cursor; ignored (already processed)',
      );
      continue;
    }
    seen.add(e.id);
    fresh.push(e);
  }
  for (const e of fresh) {
    if (!adapter.knownEventTypes.has(e.event_type) && !state.unknownTypes.has(e.event_type)) {
      state.unknownTypes.add(e.event_type);
      logger.warn(
        { event_type: e.event_type, event_id: e.id },
        'event type not in the spec; delivering it with a best-effort split',
      );
      deps.events.emit('event:unknown-type', { source: source.name, eventType: e.event_type });
    }
  }

  const next = nextCursor(
    position,
    listed.filter((e) => e.id > position.cursor).map((e) => e.id),
    adapter.maxDisorder,
  );
  const expansion = expandSubjects(fresh, {
    expandSubject: source.expand_subject,
    gone: state.gone,
    client: deps.client,
    limiter: state.subjects,
    signal,
    logger,
    retry: { baseMs: 500, maxMs: 30_000 },
  });
  return { url, size: listed.length, fresh, next, full, expansion };
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
 * Where to start when no cursor is stored. `latest`: ask the unfiltered feed without newer_than
 * and page forward until a short page, emitting nothing; the largest id seen is the start. That
 * holds whatever the feed answers without newer_than (the scheduling feed: its last 50; the
 * workflow spec leaves it open), at the cost of reading through the backlog when it answers the
 * oldest events. An empty feed starts from the beginning (0).
 */
async function startPosition(deps: PollerDeps): Promise<{ cursor: number; seenAbove: number[] }> {
  const { source } = deps;
  const stored = await deps.sourceState.get(source.name);
  if (stored) return { cursor: stored.eventId, seenAbove: stored.seenAbove };
  if (typeof source.start_from === 'number') return { cursor: source.start_from, seenAbove: [] };
  if (source.start_from === 'earliest') return { cursor: 0, seenAbove: [] };

  const newest = await findLatestEventId(deps.client, source.base_url, deps.signal);
  // Persist it now so a restart before the first change keeps "latest" meaning start-up time.
  await deps.sourceState.save(source.name, newest, []);
  deps.logger.info({ cursor: newest }, 'start_from latest: starting after the newest event');
  return { cursor: newest, seenAbove: [] };
}

/** The newest event id the feed lists now (0 when empty), paging forward without emitting anything. */
export async function findLatestEventId(
  client: UpstreamClient,
  baseUrl: string,
  signal?: AbortSignal,
): Promise<number> {
  let newest = 0;
  let newerThan: number | undefined;
  for (;;) {
    const url = `${baseUrl}/api/events${newerThan === undefined ? '' : `?newer_than=${newerThan}`}`;
    const res = await client.get(url, { kind: 'feed', signal });
    if (res.status !== 200) throw new Error(`feed ${url} answered ${res.status}: check the source's base_url`);
    const ids = readFeedEvents(res.resource, url).map((e) => e.id);
    newest = Math.max(newest, ...ids);
    if (ids.length < PAGE_SIZE) return newest;
    newerThan = newest;
  }
}
