import type { Resource } from '../core/resource.js';
import type { Change, ServiceKind, SubjectState } from '../core/change.js';

export type { Change, SubjectState } from '../core/change.js';

const OPERATIONS = ['metadata_updated', 'created', 'updated', 'deleted'];

/** Split `event_type` by the longest known operation suffix, else at the last `_` (docs/change-v1.md). */
export function splitEventType(eventType: string): { resource_type: string; operation: string } {
  for (const op of OPERATIONS) {
    if (eventType.endsWith(`_${op}`) && eventType.length > op.length + 1)
      return { resource_type: eventType.slice(0, -op.length - 1), operation: op };
  }
  const at = eventType.lastIndexOf('_');
  if (at <= 0 || at === eventType.length - 1) return { resource_type: eventType, operation: 'unknown' };
  return { resource_type: eventType.slice(0, at), operation: eventType.slice(at + 1) };
}

/** The fields of a feed event the pipeline relies on, checked once when the page is read. */
export interface FeedEvent {
  id: number;
  event_type: string;
  /** ISO 8601 UTC with milliseconds (the decoder normalizes datetimes). */
  timestamp: string;
  changes: string[];
  self_link: string | null;
  subject_link: string | null;
  /** Embedded by the feed (`expand=subject`), when it was. */
  subject?: Resource;
  /** Embedded rule of a scheduling_created event (`expand=source`). */
  source?: Resource;
}

export interface SubjectOutcome {
  state: SubjectState;
  subject: Resource | null;
  /** `unreadable` only: why (short, bounded). */
  error?: string;
  /** Size of the fetched body it was decoded from (absent: not fetched). */
  bytes?: number;
}

export function buildChange(
  origin: { source: string; service: ServiceKind },
  event: FeedEvent,
  outcome: SubjectOutcome,
  normalizeSubject: (subject: Resource) => Resource,
): Change {
  const { resource_type, operation } = splitEventType(event.event_type);
  let subject = outcome.subject;
  // Embedded subjects arrive under the generic label "subject": name them after the change.
  if (subject && (subject.resource_type === 'subject' || !subject.resource_type))
    subject = { ...subject, resource_type };
  const change: Change = {
    schema: 'feedsync.change.v1',
    key: `${origin.source}:${event.id}`,
    source: origin.source,
    service: origin.service,
    event_id: event.id,
    event_type: event.event_type,
    resource_type,
    operation,
    occurred_at: event.timestamp,
    changes: event.changes,
    event_url: event.self_link,
    subject_url: event.subject_link,
    subject_state: outcome.state,
    subject: subject ? normalizeSubject(subject) : null,
    source_rule: event.source ?? null,
  };
  if (outcome.state === 'unreadable') {
    change.subject = null;
    change.subject_error = outcome.error ?? 'the subject could not be decoded';
  }
  return change;
}
