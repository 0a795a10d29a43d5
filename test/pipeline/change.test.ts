import { describe, expect, it } from 'vitest';
import { buildChange, splitEventType, type FeedEvent } from '../../src/pipeline/change.js';
import { schedulingAdapter } from '../../src/services/scheduling.js';
import { assertValidChange } from '../support/change-schema.js';

describe('splitEventType', () => {
  it.each([
    ['title_updated', 'title', 'updated'],
    ['title_group_metadata_updated', 'title_group', 'metadata_updated'],
    ['external_id_type_created', 'external_id_type', 'created'],
    ['publication_created', 'publication', 'created'],
    ['title_archived', 'title', 'archived'],
    ['heartbeat', 'heartbeat', 'unknown'],
    ['_created', '_created', 'unknown'],
  ])('%s → %s + %s', (type, resource, operation) => {
    expect(splitEventType(type)).toEqual({ resource_type: resource, operation });
  });
});

const base = 'http://127.0.0.1:4010/scheduling';
const event = (over: Partial<FeedEvent> = {}): FeedEvent => ({
  id: 123457,
  event_type: 'title_updated',
  timestamp: '2026-11-20T10:15:02.000Z',
  changes: ['name', 'external_id'],
  self_link: `${base}/api/events/123457`,
  subject_link: `${base}/api/titles/42`,
  ...over,
});

describe('buildChange', () => {
  const origin = { source: 'scheduling', service: 'scheduling' as const };

  it('builds the contract example', () => {
    const subject = {
      resource_type: 'subject',
      id: 42,
      name: 'Pilot',
      external_id: 'T-42',
      title_type: 'episode',
      self_link: `${base}/api/titles/42`,
      series_link: `${base}/api/title_groups/7`,
    };
    const change = buildChange(
      origin,
      event(),
      { state: 'present', subject },
      schedulingAdapter.normalizeSubject,
    );
    assertValidChange(change);
    expect(change).toEqual({
      schema: 'feedsync.change.v1',
      key: 'scheduling:123457',
      source: 'scheduling',
      service: 'scheduling',
      event_id: 123457,
      event_type: 'title_updated',
      resource_type: 'title',
      operation: 'updated',
      occurred_at: '2026-11-20T10:15:02.000Z',
      changes: ['name', 'external_id'],
      event_url: `${base}/api/events/123457`,
      subject_url: `${base}/api/titles/42`,
      subject_state: 'present',
      subject: { ...subject, resource_type: 'title' },
      source_rule: null,
    });
  });

  it('names the XML asset link of a scheduling as JSON does', () => {
    const subject = { resource_type: 'subject', id: 5, assets_link: `${base}/api/assets/9` };
    const change = buildChange(
      origin,
      event({ event_type: 'scheduling_created' }),
      { state: 'present', subject },
      schedulingAdapter.normalizeSubject,
    );
    expect(change.subject).toEqual({
      resource_type: 'scheduling',
      id: 5,
      asset_link: `${base}/api/assets/9`,
    });
  });

  it.each(['gone', 'deleted', 'skipped'] as const)('a %s subject is null and still schema-valid', (state) => {
    const change = buildChange(origin, event(), { state, subject: null }, schedulingAdapter.normalizeSubject);
    assertValidChange(change);
    expect(change.subject).toBeNull();
  });

  it('the schema rejects a present change without subject and a bad timestamp', () => {
    const change = buildChange(
      origin,
      event(),
      { state: 'present', subject: null },
      schedulingAdapter.normalizeSubject,
    );
    expect(() => assertValidChange(change)).toThrow();
    const bad = {
      ...buildChange(origin, event(), { state: 'gone', subject: null }, schedulingAdapter.normalizeSubject),
      occurred_at: '2026-11-20',
    };
    expect(() => assertValidChange(bad)).toThrow(/occurred_at/);
  });
});
