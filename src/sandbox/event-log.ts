// Every event a service produced, indexed so that a feed page costs O(log n + page) whatever the
// backlog size: per index (all events, and one per event type) the events in id order and in
// timestamp order. Batches are appended with timestamps no older than anything already logged.
import type { SandboxEvent } from './types.js';

export const FEED_PAGE_SIZE = 50;

interface Entry {
  ev: SandboxEvent;
  ms: number;
}

interface Index {
  byId: Entry[];
  byTs: Entry[];
}

export interface FeedQuery {
  /** Only events with a greater id. */
  newerThan?: number;
  /** Only these event types; undefined = all. */
  types?: string[];
  /** Timestamp order without newerThan (the workflow spec is silent): the oldest 50 (default) or the newest 50. */
  unbounded?: 'oldest' | 'newest';
}

export class EventLog {
  private readonly all: Index = { byId: [], byTs: [] };
  private readonly byType = new Map<string, Index>();
  private readonly byIdMap = new Map<number, SandboxEvent>();
  private lastMs = -Infinity;

  /**
   * @param order how the feed lists events: by id (scheduling) or by timestamp (workflow)
   * @param disorder the most places an event's timestamp rank differs from its id rank; the
   *   timestamp-ordered query relies on it to start its scan without a full pass
   */
  constructor(
    private readonly order: 'id' | 'timestamp',
    private readonly disorder: number,
  ) {}

  get size(): number {
    return this.all.byId.length;
  }

  get lastId(): number {
    return this.all.byId.at(-1)?.ev.id ?? 0;
  }

  get lastTimestampMs(): number {
    return this.lastMs;
  }

  /** Appends events given in id order; none may be older than what is already logged. */
  append(batch: SandboxEvent[]): void {
    const entries = batch.map((ev) => ({ ev, ms: Date.parse(ev.occurred_at) }));
    let prevId = this.lastId;
    for (const e of entries) {
      if (e.ev.id <= prevId) throw new RangeError(`event-log: id ${e.ev.id} not above ${prevId}`);
      if (e.ms < this.lastMs) throw new RangeError(`event-log: event ${e.ev.id} older than the log`);
      prevId = e.ev.id;
    }
    const sorted = [...entries].sort(byTimestamp);
    for (const e of entries) {
      this.all.byId.push(e);
      this.indexFor(e.ev.event_type).byId.push(e);
      this.byIdMap.set(e.ev.id, e.ev);
    }
    for (const e of sorted) {
      this.all.byTs.push(e);
      this.indexFor(e.ev.event_type).byTs.push(e);
      this.lastMs = Math.max(this.lastMs, e.ms);
    }
  }

  /** How many events a feed query without newer_than could ever list (its `total_entries`). */
  count(types?: string[]): number {
    if (!types) return this.all.byId.length;
    return [...new Set(types)].reduce((n, t) => n + (this.byType.get(t)?.byId.length ?? 0), 0);
  }

  get(id: number): SandboxEvent | undefined {
    return this.byIdMap.get(id);
  }

  /** Every event, in id order. */
  list(): SandboxEvent[] {
    return this.all.byId.map((e) => e.ev);
  }

  /** One feed page: at most 50 events, oldest first in this log's order. */
  query(q: FeedQuery): SandboxEvent[] {
    const indexes = q.types
      ? [...new Set(q.types)].map((t) => this.byType.get(t)).filter((i): i is Index => i !== undefined)
      : [this.all];
    const candidates = indexes.flatMap((index) => this.candidates(index, q.newerThan, q.unbounded));
    if (this.order === 'id') {
      candidates.sort((a, b) => a.ev.id - b.ev.id);
      // Without newer_than the scheduling feed lists the LAST 50 events (spec, Events rule 5).
      const page =
        q.newerThan === undefined ? candidates.slice(-FEED_PAGE_SIZE) : candidates.slice(0, FEED_PAGE_SIZE);
      return page.map((e) => e.ev);
    }
    candidates.sort(byTimestamp);
    const newest = q.newerThan === undefined && q.unbounded === 'newest';
    return (newest ? candidates.slice(-FEED_PAGE_SIZE) : candidates.slice(0, FEED_PAGE_SIZE)).map(
      (e) => e.ev,
    );
  }

  private candidates(index: Index, newerThan: number | undefined, unbounded = 'oldest'): Entry[] {
    if (this.order === 'id') {
      if (newerThan === undefined) return index.byId.slice(-FEED_PAGE_SIZE);
      const start = upperBound(index.byId, newerThan);
      return index.byId.slice(start, start + FEED_PAGE_SIZE);
    }
    // Workflow: the spec leaves "no newer_than" open; the dialect picks the oldest or the newest 50,
    // listed oldest first either way.
    if (newerThan === undefined) {
      return unbounded === 'newest' ? index.byTs.slice(-FEED_PAGE_SIZE) : index.byTs.slice(0, FEED_PAGE_SIZE);
    }
    // An event's timestamp rank is within `disorder` of its id rank, so nothing before
    // (first id rank above newerThan) - disorder can qualify.
    const from = Math.max(0, upperBound(index.byId, newerThan) - this.disorder);
    const out: Entry[] = [];
    for (let i = from; i < index.byTs.length && out.length < FEED_PAGE_SIZE; i++) {
      const e = index.byTs[i] as Entry;
      if (e.ev.id > newerThan) out.push(e);
    }
    return out;
  }

  private indexFor(type: string): Index {
    let index = this.byType.get(type);
    if (!index) {
      index = { byId: [], byTs: [] };
      this.byType.set(type, index);
    }
    return index;
  }
}

function byTimestamp(a: Entry, b: Entry): number {
  return a.ms - b.ms || a.ev.id - b.ev.id;
}

/** First position whose id is greater than `id`. */
function upperBound(entries: Entry[], id: number): number {
  let lo = 0;
  let hi = entries.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((entries[mid] as Entry).ev.id <= id) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
