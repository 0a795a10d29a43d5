import type { FeedEvent } from './change.js';

/** The contents of the most recent events are kept (cut) for this many ids, to say what changed. */
const DETAILED = 1_000;
/** Each field of a kept listing is cut to this many characters. */
const FIELD_CHARS = 120;
/** Re-listings already reported (id and contents), so a feed re-listing one on every page is reported once. */
const REPORTED = 1_000;

/** An event's contents as kept for a report: each field cut to FIELD_CHARS. */
interface Listing {
  event_type: string;
  subject_link: string | null;
  timestamp: string;
  changes: string;
}

/**
 * The events this process committed most recently for one source, oldest forgotten first. It is
 * what lets the poller tell an event listed behind the cursor that was delivered (a re-listing:
 * skip it) from one that never was (deliver it late), tell a re-listing with other contents
 * (report it), and what bounds the window the feed audit can check.
 *
 * Memory: per id a fingerprint of its contents (~50 bytes; 50,000 ids ≈ 2.5 MB); the contents
 * themselves, cut, only for the last DETAILED ids (≤ ~1 KB each).
 */
export class RecentIds {
  /** id → fingerprint of its contents. */
  private readonly ids = new Map<number, number>();
  private readonly detail = new Map<number, Listing>();
  /**
   * The ids in the order added, as a ring: the oldest is forgotten by its key. (Taking a Map's
   * first key instead walks over every entry deleted since its table was last rebuilt: up to a
   * capacity's worth per add, a few percent of the whole poller's CPU.)
   */
  private readonly order: Float64Array;
  private readonly reported = new Set<string>();
  /** Ids ever added; `added - size` of them have been forgotten. */
  private added = 0;
  constructor(readonly capacity = 50_000) {
    this.order = new Float64Array(capacity);
  }

  has(id: number): boolean {
    return this.ids.has(id);
  }

  add(event: FeedEvent): void {
    if (this.ids.has(event.id)) return;
    const slot = this.added % this.capacity;
    if (this.added >= this.capacity) this.ids.delete(this.order[slot]!);
    // The id added `detailed` adds ago leaves the details (read before its slot is reused).
    const detailed = Math.min(DETAILED, this.capacity);
    if (this.added >= detailed) this.detail.delete(this.order[(this.added - detailed) % this.capacity]!);
    this.order[slot] = event.id;
    this.ids.set(event.id, fingerprint(event));
    this.detail.set(event.id, listing(event));
    this.added++;
  }

  /**
   * When `event` lists an id already committed (or `pending`: being committed) with other contents,
   * and this re-listing was not reported yet: what differs, as `field: old → new` (cut), or one
   * line saying the old contents are no longer kept. Otherwise undefined.
   */
  changed(event: FeedEvent, pending?: FeedEvent): string[] | undefined {
    const print = fingerprint(event);
    const first = pending ? fingerprint(pending) : this.ids.get(event.id);
    if (first === undefined || first === print) return undefined;
    const key = `${event.id}:${print}`;
    if (this.reported.has(key)) return undefined;
    this.reported.add(key);
    if (this.reported.size > REPORTED) this.reported.delete(this.reported.values().next().value!);
    const old = pending ? listing(pending) : this.detail.get(event.id);
    if (!old) return ['contents (the first listing is no longer kept in detail)'];
    const now = listing(event);
    const fields = (Object.keys(now) as (keyof Listing)[]).filter((k) => old[k] !== now[k]);
    if (fields.length === 0) return [`contents past their first ${FIELD_CHARS} characters`];
    return fields.map((k) => `${k}: ${JSON.stringify(old[k])} → ${JSON.stringify(now[k])}`);
  }

  /** How many ids were added so far (a position: ids added after it are all still known while `forgotten` is below it). */
  get total(): number {
    return this.added;
  }

  /** How many of the ids added so far have been forgotten. */
  get forgotten(): number {
    return this.added - this.ids.size;
  }
}

function cut(s: string): string {
  return s.length > FIELD_CHARS ? `${s.slice(0, FIELD_CHARS)}…` : s;
}

function listing(e: FeedEvent): Listing {
  return {
    event_type: cut(e.event_type),
    subject_link: e.subject_link === null ? null : cut(e.subject_link),
    timestamp: cut(e.timestamp),
    changes: cut(e.changes.join(',')),
  };
}

/**
 * 32-bit FNV-1a of what makes two listings of an id the same event (feed-page.ts sameEvent): a
 * collision only hides a report, never loses or repeats a change.
 */
function fingerprint(e: FeedEvent): number {
  let h = 0x811c9dc5;
  for (const part of [e.event_type, e.subject_link ?? '\u0001', e.timestamp, e.changes.join(',')]) {
    for (let i = 0; i < part.length; i++) {
      h ^= part.charCodeAt(i);
      h = Math.imul(h, 0x01000193);
    }
    // A separator, so that moving text from one field to the next changes the fingerprint.
    h ^= 0xff;
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}
