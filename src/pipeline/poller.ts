import { sleep, surelyGrowingDelay, withDeadline } from '../backoff.js';
import { cut } from '../core/bounded-text.js';
import { errorMessage, UndecodableSubjectError, UpstreamAuthError } from '../core/errors.js';
import type { PollOutcome } from '../queue/driver.js';
import { PositionLost } from '../queue/queue.js';
import type { UpstreamClient } from '../upstream/client.js';
import type { FeedEvent } from './change.js';
import { nextCursor, observedDisorder, PAGE_SIZE } from './cursor.js';
import { ExpansionAborted, GoneSubjects, type Expansion } from './expand.js';
import { CatchUp } from './catch-up.js';
import { FeedAudit } from './feed-audit.js';
import { distinctEvents, readFeedEvents, readFeedPage } from './feed-page.js';
import { Semaphore } from '../semaphore.js';
import { ByteBudget, ClaimDroppedError, type PageClaim } from './page-bytes.js';
import {
  commitEvents,
  expand,
  failedPollDelay,
  feedUrl,
  type PageState,
  type PollerDeps,
  type Position,
} from './poll-context.js';
import { RecentIds } from './recent-ids.js';

export { feedUrl, type PollerDeps } from './poll-context.js';

const AUTH_RETRY_MAX_MS = 5 * 60_000;

/**
 * One source's loop: read a page after the cursor, expand its subjects, queue its changes and the
 * new cursor together (with the full pages after it that are ready: pollOnce), repeat at once
 * while pages are full, else wait `poll_interval_ms`. A page that fails anywhere is retried with
 * backoff and the cursor stays where it was.
 */
export async function runPoller(deps: PollerDeps): Promise<void> {
  const { source, signal, logger } = deps;
  const state: PageState = {
    unknownTypes: new Set<string>(),
    gone: new GoneSubjects(),
    subjects: new Semaphore(source.subject_concurrency),
    bytes: new ByteBudget(source.max_page_bytes),
    recent: new RecentIds(),
    disorder: deps.adapter.maxDisorder,
    floor: 0,
    auditSoon: false,
  };
  const audit = new FeedAudit(deps, state);
  const catchUp = new CatchUp(deps, state);
  let failures = 0;
  let position: Position | undefined;
  let ahead: ReadAhead | undefined;
  // Every step of an iteration is bounded on its own; should one ever hang anyway, say where.
  const watch = watchIteration(deps);

  while (!signal.aborted) {
    const started = performance.now();
    try {
      if (!position) {
        watch.stage('start position');
        position = await startPosition(deps, state);
        audit.begin(position);
      }
      watch.stage('poll');
      const result = await pollOnce(deps, state, position, ahead);
      position = result.position;
      ahead = result.ahead;
      failures = 0;
      // One poll per page read, each its share of the time (pages are read while others expand).
      const durationSeconds = (performance.now() - started) / 1000 / result.pageSizes.length;
      result.pageSizes.forEach((pageSize, i) =>
        deps.events.emit('poll:finished', {
          source: source.name,
          ok: true,
          durationSeconds,
          pageSize,
          behind: result.full || i < result.pageSizes.length - 1,
        }),
      );
      watch.stage('status write');
      await recordPoll(deps, { ok: true, behind: result.full, lastEventAt: result.lastEventAt });
      // Sinks off the shared stream read on their own: a page each per shared page read (however
      // many were committed together), and while the source is caught up, as many as they take
      // until the next poll is due.
      const due = performance.now() + source.poll_interval_ms;
      watch.stage('catch-up');
      let reading = true;
      for (let page = 0; page < result.pageSizes.length && reading && !signal.aborted; page++)
        reading = await catchUp.step(position);
      if (!result.full) {
        watch.stage('audit');
        await audit.runIfDue(position);
        watch.stage('catch-up');
        while (reading && performance.now() < due && !signal.aborted) reading = await catchUp.step(position);
        watch.stage('idle');
        await sleep(Math.max(0, due - performance.now()), signal);
      }
    } catch (err) {
      ahead?.abort();
      ahead = undefined;
      if (signal.aborted && (err instanceof ExpansionAborted || isAbort(err))) break;
      // The store holds another cursor than ours: start again from what it holds.
      if (err instanceof PositionLost) position = undefined;
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
      watch.stage('status write');
      await recordPoll(deps, { ok: false, behind: false, error: errorMessage(err) });
      watch.stage('idle');
      // Wrong credentials, or a source stopped on a subject that can never be decoded: at most once
      // per poll interval, backing off to minutes; never a tight loop.
      const delay =
        err instanceof UpstreamAuthError || err instanceof UndecodableSubjectError
          ? Math.max(
              source.poll_interval_ms,
              surelyGrowingDelay(failures, source.poll_interval_ms, AUTH_RETRY_MAX_MS),
            )
          : failedPollDelay(failures, source.poll_interval_ms);
      logger.error(
        { err: errorMessage(err), failures, retry_in_ms: Math.round(delay) },
        'poll failed; cursor not moved',
      );
      await sleep(delay, signal);
    }
  }
  ahead?.abort();
  watch.stop();
}

/** Warn, every 30 s, while one step of the poll loop has been running for over 30 s. */
const STUCK_MS = 30_000;

function watchIteration(deps: PollerDeps): { stage(name: string): void; stop(): void } {
  let stage = 'start';
  let since = performance.now();
  let warned = 0;
  const timer = setInterval(() => {
    const ms = performance.now() - since;
    if (stage === 'idle' || ms < STUCK_MS || ms - warned < STUCK_MS) return;
    warned = ms;
    deps.logger.warn(
      { stage, ms: Math.round(ms) },
      `poll loop stuck in ${stage} for ${Math.round(ms / 1000)} s`,
    );
  }, STUCK_MS / 6);
  timer.unref();
  return {
    stage(name) {
      stage = name;
      since = performance.now();
      warned = 0;
    },
    stop: () => clearInterval(timer),
  };
}

/** How long the poll loop waits for its status write before going on without it. */
const RECORD_POLL_MS = 2_000;

/**
 * The outcome is for `status` and /readyz only: failing to record it (Redis briefly away) must not
 * fail the poll, nor hold it up: a write caught in a failover may never be answered (ioredis can
 * leave a command cut mid-flight unsettled), and polling would then stop without a word.
 */
async function recordPoll(deps: PollerDeps, outcome: PollOutcome): Promise<void> {
  try {
    const written = deps.sourceState.recordPoll(deps.source.name, outcome).then(() => true);
    if (!(await withDeadline(written, RECORD_POLL_MS)))
      deps.logger.warn(
        { timeout_ms: RECORD_POLL_MS },
        'cannot record the poll outcome for status: no answer in time; polling goes on',
      );
  } catch (err) {
    deps.logger.warn({ err: errorMessage(err) }, 'cannot record the poll outcome for status');
  }
}

function isAbort(err: unknown): boolean {
  return (
    err instanceof Error && (err.name === 'AbortError' || (err as { code?: string }).code === 'ABORT_ERR')
  );
}

/** Log lines about new unknown event types stop here (the metric counts them all, as "unknown"). */
const MAX_LOGGED_UNKNOWN_TYPES = 20;

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
  /** The page's subject bytes (max_page_bytes): released once it is committed or has failed. */
  claim: PageClaim;
}

/**
 * While catching up, the next page is read and its subjects fetched during this one's expansion and
 * commit: the cursor it needs is known as soon as this page is read. It is committed with this
 * page or after it (in order), and dropped, its requests aborted, if this page fails.
 */
interface ReadAhead {
  url: string;
  page: Promise<PageRead>;
  abort(): void;
  /**
   * Takes the page up for commit (it no longer gives way to other pages' bytes); false when it was
   * dropped to free its bytes for a page that commits first: read it again.
   */
  take(): boolean;
}

interface PollResult {
  position: Position;
  ahead?: ReadAhead;
  /** Events listed on each page committed, in feed order. */
  pageSizes: number[];
  full: boolean;
  lastEventAt?: number;
}

/**
 * Pages committed together at most while catching up. Each commit costs a store transaction (a
 * Redis transaction and, per sink shard, a job to take, deliver and complete in scaled mode), so
 * a backlog goes through in commits of several pages; a caught-up source commits page by page.
 */
const GROUP_PAGES = 16;
/**
 * How long a commit waits for the page read ahead to join it. Pages are read in order, so a group
 * only forms if the next page's subjects are in within this; otherwise (a slow subject, bytes held
 * by the group) the pages so far commit without it, and it stays the page read ahead.
 */
const GROUP_WAIT_MS = 200;

/**
 * Reads the page after `position` and commits it, together with the pages after it (read ahead in
 * order) that are ready soon enough: one commit from `position` to the last page's position.
 */
async function pollOnce(
  deps: PollerDeps,
  state: PageState,
  position: Position,
  ahead: ReadAhead | undefined,
): Promise<PollResult> {
  const { source, adapter, logger } = deps;
  const url = feedUrl(source, adapter, position.cursor, source.event_types);
  let page: PageRead;
  if (ahead?.url === url && ahead.take()) page = await ahead.page;
  else {
    ahead?.abort();
    page = await readPage(deps, state, position, url, deps.signal, state.bytes.open());
  }
  const group: { page: PageRead; expansion: Expansion }[] = [];
  let next: ReadAhead | undefined;
  try {
    group.push({ page, expansion: await page.expansion });
    const fresh = () => group.flatMap((g) => g.page.fresh);
    next = page.full ? readAhead(deps, state, page.next, fresh()) : undefined;
    while (next && group.length < GROUP_PAGES) {
      const joined = await readyWithin(next, GROUP_WAIT_MS);
      if (!joined || !next.take()) break;
      page = joined;
      group.push({ page, expansion: await page.expansion });
      next = page.full ? readAhead(deps, state, page.next, fresh()) : undefined;
    }
    const events = fresh();
    const { changes, lastEventAt } = await commitEvents(
      deps,
      state,
      events,
      joinExpansions(group.map((g) => g.expansion)),
      page.next,
      position,
    );
    if (changes.length)
      logger.debug(
        { cursor: page.next.cursor, changes: changes.length, pages: group.length },
        'pages committed',
      );
    return {
      position: page.next,
      pageSizes: group.map((g) => g.page.size),
      full: page.full,
      lastEventAt,
      ahead: next,
    };
  } catch (err) {
    next?.abort();
    throw err;
  } finally {
    page.claim.release();
    for (const g of group) g.page.claim.release();
  }
}

/** The page read ahead, once listed and expanded within `ms`; undefined if it is not (or failed). */
function readyWithin(ahead: ReadAhead, ms: number): Promise<PageRead | undefined> {
  const ready = ahead.page.then((p) => p.expansion.then(() => p));
  return withDeadline(ready, ms).catch(() => undefined);
}

/** The expansions of consecutive pages, as one of their events in order. */
function joinExpansions(parts: Expansion[]): Expansion {
  if (parts.length === 1) return parts[0]!;
  return {
    outcomes: parts.flatMap((e) => e.outcomes),
    notFound: parts.reduce((n, e) => n + e.notFound, 0),
  };
}

/** `before`: the events of the page being committed meanwhile (not in `state.recent` yet). */
function readAhead(deps: PollerDeps, state: PageState, position: Position, before: FeedEvent[]): ReadAhead {
  const controller = new AbortController();
  const url = feedUrl(deps.source, deps.adapter, position.cursor, deps.source.event_types);
  const signal = AbortSignal.any([deps.signal, controller.signal]);
  // Speculative: it waits for the bytes of the page being committed, and gives its own back (its
  // requests aborted) when a page that commits first needs them.
  const claim = state.bytes.open({
    speculative: true,
    onDrop: () => {
      deps.logger.debug({ url }, 'page read ahead dropped: a page committed before it needs its bytes');
      controller.abort(new ClaimDroppedError('page read ahead dropped'));
    },
  });
  const page = readPage(deps, state, position, url, signal, claim, before);
  // Failures surface when the page is awaited; a page dropped unread must not be an unhandled rejection.
  page.then((p) => p.expansion).catch(() => undefined);
  return {
    url,
    page,
    abort: () => {
      controller.abort();
      claim.release();
    },
    take: () => {
      if (claim.dropped) return false;
      claim.promote();
      return true;
    },
  };
}

/**
 * Read the page at `url` (after `position`), pick its fresh events and start their expansion
 * within `claim`, which the caller releases once the page is committed or has failed (it is
 * released here when the page cannot even be read).
 */
async function readPage(
  deps: PollerDeps,
  state: PageState,
  position: Position,
  url: string,
  signal: AbortSignal,
  claim: PageClaim,
  before: FeedEvent[] = [],
): Promise<PageRead> {
  let listed: Omit<PageRead, 'expansion' | 'claim'>;
  try {
    listed = await listPage(deps, state, position, url, signal, before);
  } catch (err) {
    claim.release();
    throw err;
  }
  return { ...listed, expansion: expand(deps, state, listed.fresh, signal, claim), claim };
}

async function listPage(
  deps: PollerDeps,
  state: PageState,
  position: Position,
  url: string,
  signal: AbortSignal,
  before: FeedEvent[],
): Promise<Omit<PageRead, 'expansion' | 'claim'>> {
  const res = await deps.client.get(url, { kind: 'feed', signal });
  if (res.status !== 200) throw new Error(`feed ${url} answered ${res.status}: check the source's base_url`);
  const listed = distinctEvents(deps, readFeedPage(deps, res.resource, url), url);
  const full = listed.length >= PAGE_SIZE;
  if (full) noteDisorder(deps, state, listed, url);

  const fresh = pickFresh(deps, state, position, listed, url, before);
  if (position.cursor === 0 && state.floor < 0 && !listed.some((e) => e.id === 0)) {
    const zero = await listedEventZero(deps, signal);
    if (zero && !state.recent.has(0)) fresh.unshift(zero);
  }
  noteUnknownTypes(deps, state, fresh);

  const next = nextCursor(
    position,
    listed.filter((e) => e.id > position.cursor).map((e) => e.id),
    state.disorder,
    full,
  );
  return { url, size: listed.length, fresh, next, full };
}

/**
 * Event 0 is newer than no `newer_than` (the specs' filter is "a greater id", and ids start at 0 at
 * the lowest), so no request after a cursor lists it; the feed asked without newer_than does when
 * it holds at most 50 events (the scheduling feed answers its last 50, the workflow feed its first
 * or last 50). So while a source that starts from `earliest` (or from a stored cursor of 0) is
 * still at cursor 0, each page is read that way too, and event 0, when listed and not delivered by
 * this process yet, is delivered first. A scheduling feed that already holds more than 50 events
 * never lists event 0 again (docs/upstream-security.md says so).
 */
async function listedEventZero(deps: PollerDeps, signal: AbortSignal): Promise<FeedEvent | undefined> {
  const url = feedUrl(deps.source, deps.adapter, undefined, deps.source.event_types);
  const res = await deps.client.get(url, { kind: 'feed', signal });
  if (res.status !== 200) throw new Error(`feed ${url} answered ${res.status}: check the source's base_url`);
  return readFeedPage(deps, res.resource, url).find((e) => e.id === 0);
}

/**
 * The events to deliver: those above the cursor not yet queued, and those at or below it that this
 * process never committed (a feed must not list them, but one that does must not lose them): they
 * are delivered late and counted. Below the operator's `start_from` nothing is taken. An event
 * already queued (`before`: the page being committed meanwhile) is not delivered again; listed with
 * other contents, it is reported (see reportRelisted).
 */
function pickFresh(
  deps: PollerDeps,
  state: PageState,
  position: Position,
  listed: FeedEvent[],
  url: string,
  before: FeedEvent[],
): FeedEvent[] {
  const queuedAbove = new Set(position.seenAbove);
  // Built only for an event listed again: most pages have none, and the pages waiting for their
  // commit can hold hundreds of events.
  let pending: Map<number, FeedEvent> | undefined;
  const pendingOf = (id: number) => (pending ??= new Map(before.map((e) => [e.id, e]))).get(id);
  const fresh: FeedEvent[] = [];
  for (const e of listed) {
    const queued =
      e.id > position.cursor
        ? queuedAbove.has(e.id)
        : state.recent.has(e.id) || pendingOf(e.id) !== undefined;
    if (queued) {
      reportRelisted(deps, state, e, pendingOf(e.id), url);
      continue;
    }
    if (e.id > position.cursor) {
      fresh.push(e);
      continue;
    }
    if (e.id <= state.floor) continue;
    deps.events.emit('feed:anomaly', { source: deps.source.name, kind: 'behind_cursor', eventId: e.id });
    deps.logger.warn(
      { event_id: e.id, cursor: position.cursor, url },
      'feed listed an event at or below the cursor that was not delivered before; delivering it late',
    );
    fresh.push(e);
  }
  return fresh;
}

/**
 * An event listed again after its change was queued, with another type, subject, timestamp or
 * changes. The contract makes a change's key (source and event id) name one change, and the first
 * is on its way to the sinks: the second is not delivered under the same key, but it is logged and
 * counted (`relisted_changed`) once per id and contents, so the operator can ask the service why.
 */
function reportRelisted(
  deps: PollerDeps,
  state: PageState,
  e: FeedEvent,
  pending: FeedEvent | undefined,
  url: string,
): void {
  const differs = state.recent.changed(e, pending);
  if (!differs) return;
  deps.events.emit('feed:anomaly', { source: deps.source.name, kind: 'relisted_changed', eventId: e.id });
  deps.logger.warn(
    { event_id: e.id, differs, url },
    `feed lists event ${e.id} again with other contents (see differs); the change queued first ` +
      `is kept (key ${deps.source.name}:${e.id}) and this listing is not delivered. ` +
      'Ask the service operators why an event changed after it was listed',
  );
}

/**
 * A full page further from id order than the cursor rule's D shows the rule's assumption is wrong
 * for this feed: events before this page may have been passed over. D is raised to what was seen
 * for the rest of the run (the rule stays sound for disorder up to the new D), and the feed audit
 * re-reads behind the cursor to find what was passed over.
 */
function noteDisorder(deps: PollerDeps, state: PageState, listed: FeedEvent[], url: string): void {
  const { disorder, eventId } = observedDisorder(listed.map((e) => e.id));
  if (disorder <= state.disorder) return;
  const raised = Math.min(disorder, PAGE_SIZE - 1);
  deps.events.emit('feed:anomaly', { source: deps.source.name, kind: 'disorder', eventId });
  deps.logger.warn(
    { event_id: eventId, disorder, bound: state.disorder, raised_to: raised, url },
    'feed page strays further from id order than the cursor rule assumed; bound raised for this run. ' +
      'Events listed earlier may have been passed over: the feed audit re-reads behind the cursor and ' +
      'delivers what it finds late (feedsync_feed_anomalies_total{kind="disorder"}); ' +
      'if it keeps rising, ask the service operators why event ids and timestamps disagree',
  );
  state.disorder = raised;
  state.auditSoon = true;
}

function noteUnknownTypes(deps: PollerDeps, state: PageState, fresh: FeedEvent[]): void {
  for (const e of fresh) {
    if (deps.adapter.knownEventTypes.has(e.event_type) || state.unknownTypes.has(e.event_type)) continue;
    if (state.unknownTypes.size >= MAX_LOGGED_UNKNOWN_TYPES) continue;
    state.unknownTypes.add(e.event_type);
    const last = state.unknownTypes.size === MAX_LOGGED_UNKNOWN_TYPES;
    deps.logger.warn(
      { event_type: cut(e.event_type), event_id: e.id },
      last
        ? `event type not in the spec; delivering it with a best-effort split (the last such line: ${MAX_LOGGED_UNKNOWN_TYPES} unknown types seen)`
        : 'event type not in the spec; delivering it with a best-effort split',
    );
    deps.events.emit('event:unknown-type', { source: deps.source.name, eventType: e.event_type });
  }
}

/**
 * Where to start when no cursor is stored. `latest`: ask the unfiltered feed without newer_than
 * and page forward until a short page, emitting nothing; the largest id seen is the start. That
 * holds whatever the feed answers without newer_than (the scheduling feed: its last 50; the
 * workflow spec leaves it open), at the cost of reading through the backlog when it answers the
 * oldest events. An empty feed starts from the beginning (0). `earliest`: cursor 0, event 0 included
 * (listedEventZero), as after a stored cursor of 0.
 */
async function startPosition(deps: PollerDeps, state: PageState): Promise<Position> {
  const { source } = deps;
  const stored = await deps.sourceState.get(source.name);
  // A sink added to a source that already runs, with a start_from of its own, is back-filled.
  const backfilled = await deps.queue.registerSinks(
    source.name,
    deps.adapter.kind,
    stored && { cursor: stored.eventId, seenAbove: stored.seenAbove },
  );
  for (const sink of backfilled)
    deps.logger.info(
      { sink },
      `sink ${sink} is new to source ${source.name}: back-filling it from its start_from`,
    );
  if (stored) {
    // At 0 (nothing after event 0 committed yet, or a reset to earliest): event 0 may still be
    // unread. Reading it again after a restart is a copy under the same key, as for any event
    // behind the cursor after a restart; never reading it would be a loss.
    if (stored.eventId === 0) state.floor = -1;
    return { cursor: stored.eventId, seenAbove: stored.seenAbove };
  }
  if (typeof source.start_from === 'number') {
    state.floor = source.start_from;
    return { cursor: source.start_from, seenAbove: [] };
  }
  if (source.start_from === 'earliest') {
    // Nothing is excluded, not even event 0 (see listedEventZero).
    state.floor = -1;
    return { cursor: 0, seenAbove: [] };
  }

  const newest = await findLatestEventId(deps.client, source.base_url, deps.signal);
  state.floor = newest;
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
    if (res.status !== 200)
      throw new Error(`feed ${url} answered ${res.status}: check the source's base_url`);
    const ids = readFeedEvents(res.resource, url).map((e) => e.id);
    newest = Math.max(newest, ...ids);
    if (ids.length < PAGE_SIZE) return newest;
    newerThan = newest;
  }
}
