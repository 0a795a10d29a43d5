// Typed pipeline events. Observability (metrics, readiness, progress output) subscribes to these
// instead of metric calls scattered through the code. Emitting never throws.
import { EventEmitter } from 'node:events';
import type { RefusalReason } from './errors.js';

/**
 * duplicate_id: the same id listed twice on one page (identical: delivered once); behind_cursor:
 * an event at or below the cursor that was not delivered before (delivered late); disorder: an
 * event the cursor rule had passed over, found by re-reading behind the cursor (delivered late);
 * relisted_changed: an event already queued listed again with other contents (the change queued
 * first is kept: a key names one change; the new listing is reported, not delivered).
 */
export const FEED_ANOMALY_KINDS = ['duplicate_id', 'behind_cursor', 'disorder', 'relisted_changed'] as const;
export type FeedAnomalyKind = (typeof FEED_ANOMALY_KINDS)[number];

export type DeliveryOutcome = 'ok' | 'retry' | 'dead';

/** The per-source memory limits a page can hit (the `reason` of feedsync_page_refusals_total). */
export const PAGE_LIMITS = ['max_page_bytes', 'max_change_bytes'] as const;
export type PageLimit = (typeof PAGE_LIMITS)[number];

/** What became of an undecodable subject (the `action` of feedsync_undecodable_subjects_total). */
export const UNDECODABLE_ACTIONS = ['stopped', 'delivered_unreadable'] as const;
export type UndecodableAction = (typeof UNDECODABLE_ACTIONS)[number];

/**
 * What went wrong talking to Redis (scaled mode), by what the operator has to do about it:
 * credentials, an ACL permission, a cluster node or a replica instead of a standalone primary,
 * the network, TLS, or anything else. See src/queue/bullmq/redis-errors.ts.
 */
export const REDIS_ERROR_KINDS = [
  'wrongpass',
  'noperm',
  'moved',
  'readonly',
  'unreachable',
  'tls',
  'other',
] as const;
export type RedisErrorKind = (typeof REDIS_ERROR_KINDS)[number];

export interface PipelineEventMap {
  /** One HTTP exchange with an upstream (after digest handling; one per attempt). */
  'http:response': { source: string; kind: 'feed' | 'subject'; code: string };
  /** A poll (one feed page, expanded and committed, or failed) finished. */
  'poll:finished': {
    source: string;
    ok: boolean;
    durationSeconds: number;
    /** Events in the page (0 on error). */
    pageSize: number;
    /** The page was full (50): more is waiting upstream. */
    behind: boolean;
    error?: unknown;
  };
  /** A page's changes are durably queued and the cursor saved. */
  'page:committed': {
    source: string;
    cursor: number;
    /** event_type of every change in the page, in feed order; types the specs do not list as "unknown". */
    eventTypes: string[];
    /** occurred_at of the newest event committed, epoch seconds. */
    lastEventTimestamp?: number;
    /** changes queued per sink name. */
    enqueued: Record<string, number>;
    /** subjects that answered 404 in this page. */
    gone: number;
  };
  /** feedsync refused an upstream body or link (see UpstreamRefusedError). */
  'upstream:refused': { source: string; reason: RefusalReason; url: string };
  /** A response held bytes that are not valid UTF-8 (replaced by U+FFFD). One per response. */
  'upstream:invalid-utf8': { source: string; url: string };
  /** The feed broke a rule the cursor relies on; what feedsync did about it is in `kind`. */
  'feed:anomaly': { source: string; kind: FeedAnomalyKind; eventId: number };
  /**
   * Deliveries that finished after this process lost its lease (frozen past it while another took
   * over): the sink got them, the new owner delivers them again. The only copies a freeze causes.
   */
  'delivery:after-lease-loss': { sink: string; changes: number };
  /** A sink's backlog reached its bound: the shared poll of `source` no longer queues for it. */
  'sink:parked': { source: string; sink: string };
  /**
   * A page of a sink's own catch-up (after parking, a backfill or a replay) was queued; `joined`:
   * it rejoined the shared stream with it; `lost`: ids passed while it was parked that the feed no
   * longer lists.
   */
  'catchup:committed': { source: string; sink: string; queued: number; joined: boolean; lost: number };
  /** An event type the specs do not list; emitted once per type and source. */
  'event:unknown-type': { source: string; eventType: string };
  /** A sink started failing (only probes reach it now) or answered again. */
  'sink:failing': { sink: string; failing: boolean };
  /** A probe of a failing sink finished: `ok` when the sink answered (a NeverError is an answer). */
  'sink:probe': { sink: string; ok: boolean };
  /** A delivery attempt to a sink finished: one sink call (one change, or a batch of them). */
  'delivery:finished': {
    sink: string;
    outcome: DeliveryOutcome;
    durationSeconds: number;
    /** The changes the call settled, in order; endToEndSeconds (occurred_at → acknowledged) when ok. */
    changes: readonly { key: string; endToEndSeconds?: number }[];
    error?: unknown;
  };
  /** A page refused for a memory limit of its source (max_page_bytes, max_change_bytes). */
  'page:refused': { source: string; limit: PageLimit };
  /**
   * Subjects that can never be decoded: a page stopped on one (on_undecodable_subject: stop; once
   * per attempt), or changes delivered with subject_state "unreadable" (at their commit).
   */
  'subject:undecodable': { source: string; action: UndecodableAction; count: number };
  /** A Redis connection or command failed (scaled mode); one per failure, logged or not. */
  'redis:error': { kind: RedisErrorKind };
}

export type PipelineEventName = keyof PipelineEventMap;

/** A small typed emitter whose emit() swallows listener failures: observing must never break work. */
export class PipelineEvents {
  private readonly emitter = new EventEmitter();

  constructor() {
    this.emitter.setMaxListeners(100);
  }

  on<K extends PipelineEventName>(name: K, listener: (payload: PipelineEventMap[K]) => void): () => void {
    this.emitter.on(name, listener as (p: unknown) => void);
    return () => this.emitter.off(name, listener as (p: unknown) => void);
  }

  emit<K extends PipelineEventName>(name: K, payload: PipelineEventMap[K]): void {
    for (const listener of this.emitter.listeners(name)) {
      try {
        (listener as (p: unknown) => void)(payload);
      } catch {
        // A broken observer must not stop the pipeline; it is the observer's bug to surface.
      }
    }
  }
}
