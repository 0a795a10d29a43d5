// The feed audit: re-reads the feed behind the cursor to find events the cursor rule passed over.
//
// The cursor rule (cursor.ts) is sound only while the feed lists every event within D places of its
// id order. The workflow spec orders its feed by timestamp and filters `newer_than` by id, and says
// nothing of how far the two may disagree: an event listed more than D places late has a smaller id
// than the cursor by the time it would be listed, and no request after that shows it again. Nothing
// on the pages read says so. So, while the source is caught up and at most once per interval, the
// audit walks the window committed since the previous audit again with small steps (newer_than = the
// AUDIT_STEP-th smallest id of the previous audit page), so an event listed up to PAGE_SIZE −
// AUDIT_STEP places late shows up on some audit page. Every event it finds at or below the cursor
// that this process never committed is delivered late and counted (`disorder`), with a log line.
//
// Bounds: the window is what `RecentIds` still remembers (ids older than that cannot be told apart
// from delivered ones); one audit makes at most window / AUDIT_STEP + 2 feed requests; subjects are
// fetched only for the events found.
import { errorMessage } from '../core/errors.js';
import type { FeedEvent } from './change.js';
import { PAGE_SIZE } from './cursor.js';
import { readFeedPage } from './feed-page.js';
import {
  commitEvents,
  expand,
  feedUrl,
  type PageState,
  type PollerDeps,
  type Position,
} from './poll-context.js';

/** Each audit request starts after the AUDIT_STEP-th smallest id of the one before. */
const AUDIT_STEP = 10;
/** One audit never makes more feed requests than this. */
const MAX_AUDIT_REQUESTS = 2000;
export const DEFAULT_AUDIT_INTERVAL_MS = 60_000;

interface Checkpoint {
  cursor: number;
  /** `recent.total` when the cursor was there. */
  total: number;
}

export class FeedAudit {
  private checkpoint: Checkpoint | undefined;
  private lastRun = Date.now();

  constructor(
    private readonly deps: PollerDeps,
    private readonly state: PageState,
    private readonly intervalMs = deps.auditIntervalMs ?? DEFAULT_AUDIT_INTERVAL_MS,
  ) {}

  /** Where the poller starts: the first audit's window begins there. */
  begin(position: Position): void {
    this.checkpoint ??= { cursor: position.cursor, total: this.state.recent.total };
  }

  /** Called when the source is caught up (a short page was committed at `position`). */
  async runIfDue(position: Position): Promise<void> {
    const { recent } = this.state;
    const from = this.checkpoint;
    if (from === undefined) return;
    if (this.state.disorder === 0) return;
    if (!this.state.auditSoon && Date.now() - this.lastRun < this.intervalMs) return;
    if (recent.total === from.total || position.cursor <= from.cursor) return;
    this.lastRun = Date.now();
    this.state.auditSoon = false;
    try {
      // Ids committed after `from` and already forgotten cannot be checked: audit what is still known.
      if (recent.forgotten > from.total) {
        this.deps.logger.warn(
          { from: from.cursor, forgotten: recent.forgotten - from.total },
          'feed audit: more events were committed since the last audit than it can remember; auditing from here on',
        );
      } else {
        await this.audit(from.cursor, position);
      }
      this.checkpoint = { cursor: position.cursor, total: recent.total };
    } catch (err) {
      if (this.deps.signal.aborted) return;
      this.deps.logger.warn({ err: errorMessage(err) }, 'feed audit failed; it is tried again later');
    }
  }

  private async audit(from: number, position: Position): Promise<void> {
    const { deps, state } = this;
    const missed = new Map<number, FeedEvent>();
    const limit = Math.min(
      MAX_AUDIT_REQUESTS,
      Math.ceil((state.recent.total - (this.checkpoint?.total ?? 0)) / AUDIT_STEP) + 2,
    );
    let after = from;
    for (let requests = 0; after < position.cursor && requests < limit; requests++) {
      const url = feedUrl(deps.source, deps.adapter, after, deps.source.event_types);
      const res = await deps.client.get(url, { kind: 'feed', signal: deps.signal });
      if (res.status !== 200) throw new Error(`feed ${url} answered ${res.status}`);
      const listed = readFeedPage(deps, res.resource, url);
      for (const e of listed) {
        if (e.id <= position.cursor && e.id > state.floor && !state.recent.has(e.id)) missed.set(e.id, e);
      }
      if (listed.length < PAGE_SIZE) break;
      const above = listed
        .map((e) => e.id)
        .filter((id) => id > after)
        .sort((a, b) => a - b);
      const next = above[Math.min(AUDIT_STEP, above.length) - 1];
      if (next === undefined || next <= after) break;
      after = next;
    }
    if (missed.size > 0)
      await this.deliverLate(
        [...missed.values()].sort((a, b) => a.id - b.id),
        position,
      );
  }

  private async deliverLate(events: FeedEvent[], position: Position): Promise<void> {
    const { deps, state } = this;
    const claim = state.bytes.open();
    try {
      await commitEvents(
        deps,
        state,
        events,
        await expand(deps, state, events, deps.signal, claim),
        position,
      );
    } finally {
      claim.release();
    }
    for (const e of events) {
      deps.events.emit('feed:anomaly', { source: deps.source.name, kind: 'disorder', eventId: e.id });
      deps.logger.warn(
        { event_id: e.id, cursor: position.cursor },
        'feed audit found an event the cursor rule had passed over (listed further from id order than it allows); delivered late. ' +
          'Ask the service operators why event ids and timestamps disagree',
      );
    }
  }
}
