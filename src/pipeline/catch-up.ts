// A sink's own reader of a source's feed (queue/sink-positions.ts has the model): for each sink off
// the shared stream whose backlog has room, read the page after ITS position, queue for it the
// events the shared stream has already passed, and move its position — in one fenced commit — until
// its position covers the shared one, when it rejoins the shared stream in that same commit.
//
// It runs inside the source's poller loop, between shared pages: the shared position cannot move
// during a step, catch-up requests share the source's upstream client and subject budget, and a
// recovering sink can never make the service see more than one extra reader per lagging sink.
import { errorMessage } from '../core/errors.js';
import { ClaimDroppedError, type PageClaim } from './page-bytes.js';
import type { LaggingSink } from '../queue/queue.js';
import { catchUpWindow, covers, isBehind } from '../queue/sink-positions.js';
import { passesFilter } from '../sinks/filter.js';
import { splitEventType, type FeedEvent, type SubjectOutcome } from './change.js';
import { nextCursor, PAGE_SIZE } from './cursor.js';
import type { Expansion } from './expand.js';
import { distinctEvents, readFeedPage } from './feed-page.js';
import {
  buildChanges,
  expand,
  feedUrl,
  newestEventAt,
  type PageState,
  type PollerDeps,
  type Position,
} from './poll-context.js';

/** Lost ids named in one log line at most (the metric and `status` count them all). */
const LOGGED_LOST_IDS = 100;
/** Subjects fetched for one lagging sink serve the others reading the same events soon after. */
const OUTCOMES_KEPT = 5_000;
const OUTCOME_TTL_MS = 60_000;
/** Subject bytes the cache may keep past their pages' commits (a small share of max_page_bytes' default). */
const OUTCOMES_MAX_BYTES = 4 * 1024 * 1024;
const noop = () => undefined;

export class CatchUp {
  /** Event id → its subject outcome, as a catch-up fetched it (several sinks often lag together). */
  private readonly outcomes = new Map<
    number,
    { outcome: Promise<SubjectOutcome>; at: number; bytes: number }
  >();
  /** Body bytes of the outcomes kept. */
  private cachedBytes = 0;

  private forget(id: number): void {
    const entry = this.outcomes.get(id);
    if (!entry) return;
    this.cachedBytes -= entry.bytes;
    this.outcomes.delete(id);
  }

  /** Oldest first, until the cache is within OUTCOMES_KEPT entries and OUTCOMES_MAX_BYTES. */
  private trim(): void {
    while (this.outcomes.size > OUTCOMES_KEPT || this.cachedBytes > OUTCOMES_MAX_BYTES)
      this.forget(this.outcomes.keys().next().value!);
  }

  constructor(
    private readonly deps: PollerDeps,
    private readonly state: PageState,
  ) {}

  /**
   * Pages for every lagging sink, as many as its window has room for; true when any page was read
   * (call again soon), false when no sink could take one (none lagging, or none drained enough).
   */
  async step(shared: Position): Promise<boolean> {
    const { deps } = this;
    const lagging = await deps.queue.laggingSinks(deps.source.name);
    // Side by side: sinks that lag together read the same pages, and share their subject fetches
    // (this.outcomes) within the source's subject budget.
    const worked = await Promise.all(lagging.map((lag) => this.catchUp(lag, shared)));
    return worked.some(Boolean);
  }

  /** As many pages for one sink as its window has room for; true when any was read. */
  private async catchUp(first: LaggingSink, shared: Position): Promise<boolean> {
    const { deps } = this;
    let worked = false;
    let lag: LaggingSink | undefined = first;
    try {
      while (lag && lag.backlog < catchUpWindow(lag.bound) && !deps.signal.aborted) {
        lag = await this.page(lag, shared);
        worked = true;
      }
    } catch (err) {
      // The shared poll goes on; this sink's catch-up is tried again at the next step. A page
      // dropped to give its bytes to an older one is no failure worth a warning.
      if (err instanceof ClaimDroppedError)
        deps.logger.debug({ sink: first.sink }, 'catch-up page gave its bytes to another; read again later');
      else if (!deps.signal.aborted)
        deps.logger.warn(
          { sink: first.sink, position: lag?.cursor, err: errorMessage(err) },
          'catch-up page failed; retried at the next poll',
        );
    }
    return worked;
  }

  /** Reads and commits one page; the sink as it lags after it, or undefined once it rejoined. */
  private async page(lag: LaggingSink, shared: Position): Promise<LaggingSink | undefined> {
    // Its subjects' bytes count in the source's max_page_bytes until the page is committed; an
    // older page that needs them drops it (the sink reads it again at the next step).
    const controller = new AbortController();
    const dropped = new ClaimDroppedError('catch-up page dropped');
    const claim = this.state.bytes.open({ onDrop: () => controller.abort(dropped) });
    try {
      return await this.pageWithin(
        lag,
        shared,
        claim,
        AbortSignal.any([this.deps.signal, controller.signal]),
      );
    } catch (err) {
      throw claim.dropped ? dropped : err;
    } finally {
      claim.release();
    }
  }

  private async pageWithin(
    lag: LaggingSink,
    shared: Position,
    claim: PageClaim,
    signal: AbortSignal,
  ): Promise<LaggingSink | undefined> {
    const { deps, state } = this;
    const { source, adapter } = deps;
    const url = feedUrl(source, adapter, lag.cursor, source.event_types);
    const res = await deps.client.get(url, { kind: 'feed', signal });
    if (res.status !== 200) throw new Error(`feed ${url} answered ${res.status}`);
    const listed = distinctEvents(deps, readFeedPage(deps, res.resource, url), url);
    const full = listed.length >= PAGE_SIZE;
    const next = nextCursor(
      lag,
      listed.filter((e) => e.id > lag.cursor).map((e) => e.id),
      state.disorder,
      full,
    );
    const unseen = listed.filter((e) => !isBehind(lag, e.id));
    // Only what the shared stream has passed: the rest reaches the sink with the shared stream once
    // it rejoins. A short page listed everything after the sink's position: nothing is left between.
    // And only what the sink takes: the subjects of events its filter refuses are never fetched.
    const filter = deps.sinkFilters?.get(lag.sink);
    const fresh = unseen.filter(
      (e) => isBehind(shared, e.id) && (!filter || passesFilter(filter, eventFields(deps, e))),
    );
    const joined = !full || covers(next, shared);
    const changes = buildChanges(deps, fresh, await this.expand(fresh, claim, signal));
    const result = await deps.queue.commitCatchUp({
      source: source.name,
      sink: lag.sink,
      generation: lag.generation,
      reason: lag.reason,
      since: lag.since,
      changes,
      cursor: next.cursor,
      seenAbove: next.seenAbove,
      eventIds: unseen.map((e) => e.id),
      eventAt: newestEventAt(fresh) ?? lag.eventAt,
      join: joined,
      from: { cursor: lag.cursor, seenAbove: lag.seenAbove },
      shared: { cursor: shared.cursor, seenAbove: shared.seenAbove },
    });
    deps.events.emit('catchup:committed', {
      source: source.name,
      sink: lag.sink,
      queued: result.queued,
      joined,
      lost: result.lost.length,
    });
    if (!joined)
      return {
        ...lag,
        cursor: next.cursor,
        seenAbove: next.seenAbove,
        backlog: lag.backlog + result.queued,
        pendingIds: Math.max(0, lag.pendingIds - unseen.length),
      };
    deps.logger.info(
      { sink: lag.sink, reason: lag.reason, lagged_ms: Date.now() - lag.since },
      `sink ${lag.sink} caught up with source ${source.name} and rejoined its shared stream`,
    );
    if (result.lost.length)
      deps.logger.error(
        {
          sink: lag.sink,
          lost: result.lost.length,
          ids: result.lost.slice(0, LOGGED_LOST_IDS),
        },
        `events passed while sink ${lag.sink} was parked are no longer in the feed of ${source.name}: ` +
          'they cannot be delivered to it (lost upstream; the feed kept them for less time than the sink was parked)',
      );
    return undefined;
  }

  /** The subjects of `events`, fetched only for those no other lagging sink fetched (or is fetching) lately. */
  private async expand(events: FeedEvent[], claim: PageClaim, signal: AbortSignal): Promise<Expansion> {
    const now = Date.now();
    const known = (e: FeedEvent) => {
      const hit = this.outcomes.get(e.id);
      return hit && now - hit.at < OUTCOME_TTL_MS ? hit.outcome : undefined;
    };
    const ours = new Map<number, Promise<SubjectOutcome>>();
    const missing = events.filter((e) => !known(e));
    if (missing.length) {
      const fetched = expand(this.deps, this.state, missing, signal, claim);
      missing.forEach((e, i) => {
        const outcome = fetched.then((x) => x.outcomes[i]!);
        ours.set(e.id, outcome);
        // A failed fetch is not kept: the next reader fetches again.
        outcome.catch(() => this.forget(e.id));
        this.forget(e.id);
        const entry = { outcome, at: now, bytes: 0 };
        this.outcomes.set(e.id, entry);
        // Kept past this page's commit, so outside max_page_bytes: bounded in bytes of its own.
        void outcome.then((o) => {
          if (this.outcomes.get(e.id) !== entry) return;
          entry.bytes = o.bytes ?? 0;
          this.cachedBytes += entry.bytes;
          this.trim();
        }, noop);
      });
      this.trim();
    }
    return { outcomes: await Promise.all(events.map((e) => ours.get(e.id) ?? known(e)!)), notFound: 0 };
  }
}

/** What a sink's filter looks at, known from the feed alone (before any subject is fetched). */
function eventFields(deps: PollerDeps, e: FeedEvent) {
  return {
    source: deps.source.name,
    service: deps.adapter.kind,
    event_type: e.event_type,
    resource_type: splitEventType(e.event_type).resource_type,
  };
}
