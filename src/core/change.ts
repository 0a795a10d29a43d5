import type { Resource } from './resource.js';

export type SubjectState = 'present' | 'gone' | 'deleted' | 'skipped' | 'unreadable';
export type ServiceKind = 'scheduling' | 'workflow';

/** feedsync.change.v1 (docs/change-v1.md): the unit every sink receives. One per feed event. */
export interface Change {
  schema: 'feedsync.change.v1';
  /** `<source name>:<event_id>`: unique, stable across retries, restarts and re-polls. */
  key: string;
  source: string;
  service: ServiceKind;
  event_id: number;
  event_type: string;
  resource_type: string;
  operation: string;
  /** UTC, ISO 8601 with milliseconds and `Z`. */
  occurred_at: string;
  changes: string[];
  event_url: string | null;
  subject_url: string | null;
  subject_state: SubjectState;
  subject: Resource | null;
  /** Only with subject_state `unreadable`: why the subject could not be decoded (short, bounded). */
  subject_error?: string;
  source_rule: Resource | null;
}
