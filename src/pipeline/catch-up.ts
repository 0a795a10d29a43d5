// A sink's own reader of a source's feed (queue/sink-positions.ts has the model): for each sink off
// the shared stream whose backlog has room, read the page after ITS position, queue for it the
// events the shared stream has already passed, and move its position — in one fenced commit — until
// its position covers the shared one, when it rejoins the shared stream in that same commit.
//
// It runs inside the source's poller loop, between shared pages: the shared position cannot move
// during a step, catch-up requests share the source's upstream client and subject budget, and a
// recovering sink can never make the service see more than one extra reader per lagging sink.
import { errorMessage } from '../core/errors.js';
import type { LaggingSink } from '../queue/queue.js';
import { catchUpWindow, covers, isBehind } from '../queue/sink-positions.js';
import type { FeedEvent } from './change.js';
import { nextCursor, PAGE_SIZE } from './cursor.js';
import { readFeedEvents } from './feed-page.js';
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

export class CatchUp {
  constructor(
    private readonly deps: PollerDeps,
    private readonly state: PageState,
  ) {}

  /**
   * One page for every lagging sink that has room for one; true when any page was read (call again
   * soon), false when no sink could take one (all drained, or none lagging).
   */
  async step(shared: Position): Promise<boolean> {
    const { deps } = this;
    const lagging = await deps.queue.laggingSinks(deps.source.name);
    let worked = false;
    for (const lag of lagging) {
      if (deps.signal.aborted) break;
      if (lag.backlog >= catchUpWindow(lag.bound)) continue;
      try {
        await this.page(lag, shared);
        worked = true;
      } catch (err) {
        if (deps.signal.aborted) break;
        // The shared poll goes on; this sink's catch-up is tried again at the next step.
        deps.logger.warn(
          { sink: lag.sink, position: lag.cursor, err: errorMessage(err) },
          'catch-up page failed; retried at the next poll',
        );
      }
    }
    return worked;
  }

  private async page(lag: LaggingSink, shared: Position): Promise<void> {
    const { deps, state } = this;
    const { source, adapter } = deps;
    const url = feedUrl(source, adapter, lag.cursor, source.event_types);
    const res = await deps.client.get(url, { kind: 'feed', signal: deps.signal });
    if (res.status !== 200) throw new Error(`feed ${url} answered ${res.status}`);
    const listed = distinctById(readFeedEvents(res.resource, url));
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
    const fresh = unseen.filter((e) => isBehind(shared, e.id));
    const joined = !full || covers(next, shared);
    const expansion = await expand(deps, state, fresh, deps.signal);
    const changes = buildChanges(deps, fresh, expansion);
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
    });
    deps.events.emit('catchup:committed', {
      source: source.name,
      sink: lag.sink,
      queued: result.queued,
      joined,
      lost: result.lost.length,
    });
    if (!joined) return;
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
  }
}

function distinctById(events: FeedEvent[]): FeedEvent[] {
  const seen = new Set<number>();
  return events.filter((e) => !seen.has(e.id) && seen.add(e.id));
}
