// Property: readFeedEvents on a decoded page whose events carry random field values returns one
// well-formed event per entry, in order, or throws an invalid_event refusal naming the URL and the
// entry.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DecodeError, UpstreamRefusedError } from '../../src/core/errors.js';
import { readFeedEvents } from '../../src/pipeline/feed-page.js';
import type { Json, Resource } from '../../src/core/resource.js';

const SEED = Number(process.env.FEEDSYNC_BAD_INPUT_SEED ?? Math.floor(Math.random() * 2 ** 31));
const URL = 'http://127.0.0.1:9/workflow/api/events?newer_than=5';

const anyJson: fc.Arbitrary<Json | undefined> = fc.oneof(
  fc.constant(undefined),
  fc.jsonValue({ maxDepth: 2 }) as fc.Arbitrary<Json>,
);
const idArb = fc.oneof(
  fc.nat({ max: 2 ** 40 }),
  fc.integer({ min: -1000, max: -1 }),
  fc.double({ noNaN: false }),
  fc.constantFrom(Number.MAX_SAFE_INTEGER + 2, Infinity, -0, 0.5),
  fc.nat().map(String),
  anyJson,
);
const typeArb = fc.oneof(
  fc.constantFrom(
    'title_created',
    'job_updated',
    '  asset_deleted ',
    'weird',
    '',
    '   ',
    'a_b_c_metadata_updated',
  ),
  fc.string(),
  anyJson,
);
const timestampArb = fc.oneof(
  // Mostly within what is accepted (the epoch to now), sometimes anywhere a Date can be.
  fc.date({ noInvalidDate: true, min: new Date(0), max: new Date() }).map((d) => d.toISOString()),
  fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
  fc.constantFrom('2026-11-20T10:15:02+01:00', '2026-13-45T99:99:99Z', 'yesterday', '', '0', 'Infinity'),
  fc.string(),
  anyJson,
);
const linkArb = fc.oneof(fc.webUrl(), anyJson);
const eventArb = fc.record(
  {
    resource_type: fc.constantFrom('event', 'subject', 'x'),
    id: idArb,
    event_type: typeArb,
    timestamp: timestampArb,
    changes: fc.oneof(fc.constantFrom('name, external_id', ',,', ' a ,b,'), fc.string(), anyJson),
    self_link: linkArb,
    subject_link: linkArb,
    subject: anyJson,
    source: anyJson,
  },
  { requiredKeys: ['resource_type'] },
) as fc.Arbitrary<Resource>;

describe(`readFeedEvents with random event fields (replay: FEEDSYNC_BAD_INPUT_SEED=${SEED})`, () => {
  it('gives every entry as a well-formed event, in order, or an invalid_event refusal naming the entry', () => {
    let accepted = 0;
    let rejected = 0;
    fc.assert(
      fc.property(fc.array(eventArb, { maxLength: 8 }), (entries) => {
        const page: Resource = { resource_type: 'events', entries: entries as Json[] };
        let events;
        try {
          events = readFeedEvents(page, URL);
        } catch (err) {
          if (!(err instanceof UpstreamRefusedError) || err.reason !== 'invalid_event') throw err;
          expect(err.message).toMatch(/: feed entry \d+: /);
          expect(err.message).toContain(URL);
          // Upstream values are quoted cut: a message stays short whatever the entry holds.
          expect(err.message.length).toBeLessThan(URL.length + 400);
          rejected++;
          return;
        }
        accepted++;
        expect(events).toHaveLength(entries.length);
        events.forEach((e, i) => {
          const raw = entries[i]!;
          expect(e.id).toBe(raw.id);
          expect(Number.isSafeInteger(e.id) && e.id >= 0).toBe(true);
          expect(e.event_type).toBe((raw.event_type as string).trim());
          expect(e.event_type).not.toBe('');
          expect(e.timestamp).toBe(new Date(raw.timestamp as string).toISOString());
          expect(Date.parse(e.timestamp)).toBeGreaterThanOrEqual(0);
          expect(Date.parse(e.timestamp)).toBeLessThanOrEqual(Date.now() + 24 * 3600_000);
          expect(e.changes.every((c) => c !== '' && c === c.trim())).toBe(true);
          for (const link of [e.self_link, e.subject_link])
            expect(link === null || typeof link === 'string').toBe(true);
          for (const r of [e.subject, e.source])
            expect(r === undefined || (typeof r === 'object' && r !== null && !Array.isArray(r))).toBe(true);
        });
      }),
      { seed: SEED, numRuns: 600 },
    );
    expect(accepted).toBeGreaterThan(20);
    expect(rejected).toBeGreaterThan(20);
  });

  it('anything but a collection is a DecodeError', () => {
    fc.assert(
      fc.property(
        fc.record({
          resource_type: fc.string(),
          entries: fc.oneof(fc.constant(undefined), fc.string(), fc.object()),
        }),
        (page) => {
          expect(() => readFeedEvents(page as Resource, URL)).toThrow(DecodeError);
        },
      ),
      { seed: SEED, numRuns: 100 },
    );
  });
});
