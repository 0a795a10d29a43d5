// Builds valid feedsync.change.v1 objects for sink tests. Event ids come from one counter per
// process so changes built by different tests never share a key by accident.
import pino from 'pino';
import type { Change } from '../core/change.js';
import type { SinkContext } from '../sinks/sink.js';

export const BASE = 'http://127.0.0.1:4010/scheduling';

let nextId = 100_000;

/** A fresh event id, unique within this test process. */
export function nextEventId(): number {
  return nextId++;
}

/**
 * A `title_updated` change of title `subjectId` (default: its own subject, so changes built
 * without one have distinct subjects). `subject` follows `subject_state` unless overridden.
 */
export function makeChange(overrides: Partial<Change> & { subjectId?: number } = {}): Change {
  const { subjectId, ...fields } = overrides;
  const source = fields.source ?? 'scheduling';
  const eventId = fields.event_id ?? nextEventId();
  const id = subjectId ?? eventId;
  const subjectUrl = `${BASE}/api/titles/${id}`;
  const state = fields.subject_state ?? 'present';
  return {
    schema: 'feedsync.change.v1',
    key: `${source}:${eventId}`,
    source,
    service: 'scheduling',
    event_id: eventId,
    event_type: 'title_updated',
    resource_type: 'title',
    operation: 'updated',
    occurred_at: fields.occurred_at ?? new Date(Date.UTC(2026, 10, 20, 10, 0, 0) + eventId).toISOString(),
    changes: ['name'],
    event_url: `${BASE}/api/events/${eventId}`,
    subject_url: subjectUrl,
    subject_state: state,
    subject:
      state === 'present'
        ? {
            resource_type: 'title',
            id,
            name: `Pilot & "Friends" – Ünïcode <${eventId}>`,
            external_id: `T-${id}`,
            self_link: subjectUrl,
          }
        : null,
    source_rule: null,
    ...fields,
  };
}

export function testContext(name: string, configDir: string): SinkContext {
  return { name, configDir, logger: pino({ level: 'silent' }) };
}
