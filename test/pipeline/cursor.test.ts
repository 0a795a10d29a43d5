import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { nextCursor, observedDisorder, PAGE_SIZE } from '../../src/pipeline/cursor.js';

/** A feed that lists events by "listing position" but filters newer_than by id, like the workflow one. */
function makeFeed(ids: number[], listingOrder: number[]) {
  // listingOrder[i] = position at which ids[i] is listed
  const listed = ids.map((id, i) => ({ id, pos: listingOrder[i]! })).sort((a, b) => a.pos - b.pos);
  return (newerThan: number) =>
    listed
      .filter((e) => e.id > newerThan)
      .slice(0, PAGE_SIZE)
      .map((e) => e.id);
}

/** Ids in ascending order, listed with each event at most `d` places from its id rank. */
function disordered(n: number, d: number, rnd: () => number) {
  const ids: number[] = [];
  let id = 0;
  for (let i = 0; i < n; i++) ids.push((id += 1 + Math.floor(rnd() * 3)));
  const pos = ids.map((_, i) => i);
  // permute inside blocks of d+1 consecutive ranks: displacement ≤ d
  for (let start = 0; start < n; start += d + 1) {
    const block = pos.slice(start, start + d + 1);
    for (let i = block.length - 1; i > 0; i--) {
      const j = Math.floor(rnd() * (i + 1));
      [block[i], block[j]] = [block[j]!, block[i]!];
    }
    pos.splice(start, block.length, ...block);
  }
  return { ids, pos };
}

function drain(feed: (n: number) => number[], maxDisorder: number) {
  let state = { cursor: 0, seenAbove: [] as number[] };
  const delivered: number[] = [];
  for (let requests = 0; requests < 10_000; requests++) {
    const page = feed(state.cursor);
    const seen = new Set(state.seenAbove);
    for (const id of page) if (!seen.has(id) && id > state.cursor) delivered.push(id);
    const next = nextCursor(state, page, maxDisorder);
    if (page.length < PAGE_SIZE && next.cursor === state.cursor) return { delivered, requests: requests + 1 };
    state = next;
    if (page.length < PAGE_SIZE) return { delivered, requests: requests + 2 };
  }
  throw new Error('feed did not drain');
}

describe('nextCursor', () => {
  it('takes the largest id of a short page', () => {
    expect(nextCursor({ cursor: 10, seenAbove: [] }, [12, 11, 15], 5)).toEqual({ cursor: 15, seenAbove: [] });
  });

  it('takes the largest id of a full page ordered by id when no disorder is allowed', () => {
    const ids = Array.from({ length: 50 }, (_, i) => 100 + i * 2);
    expect(nextCursor({ cursor: 0, seenAbove: [] }, ids, 0).cursor).toBe(198);
  });

  it('holds back D places on a full page and remembers what it already queued above the cursor', () => {
    const ids = Array.from({ length: 50 }, (_, i) => i + 1);
    const step = nextCursor({ cursor: 0, seenAbove: [] }, ids, 5);
    expect(step.cursor).toBe(45);
    expect(step.seenAbove).toEqual([46, 47, 48, 49, 50]);
  });

  it('never moves backwards and keeps an empty page where it was', () => {
    expect(nextCursor({ cursor: 99, seenAbove: [120] }, [], 5)).toEqual({ cursor: 99, seenAbove: [120] });
  });

  it('delivers every event exactly once from a feed listed up to D places out of id order', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 5 }),
        fc.integer({ min: 1, max: 600 }),
        fc.integer(),
        (d, n, seed) => {
          let s = seed >>> 0;
          const rnd = () => (s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32;
          const { ids, pos } = disordered(n, d, rnd);
          const { delivered } = drain(makeFeed(ids, pos), 5);
          expect([...delivered].sort((a, b) => a - b)).toEqual(ids);
          expect(new Set(delivered).size).toBe(delivered.length);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('shows why: moving to the largest id of a disordered full page skips events', () => {
    // ranks 49 and 50 swapped across the page boundary: id 51 listed on page one, 50 after it
    const ids = Array.from({ length: 60 }, (_, i) => i + 1);
    const pos = ids.map((_, i) => (i === 49 ? 50 : i === 50 ? 49 : i));
    const naive = drain(makeFeed(ids, pos), 0).delivered;
    expect(naive).not.toContain(50);
    expect(drain(makeFeed(ids, pos), 5).delivered.sort((a, b) => a - b)).toEqual(ids);
  });

  it('costs about one feed request per 45 events on a steady full-page drain', () => {
    const ids = Array.from({ length: 4500 }, (_, i) => i + 1);
    const { requests } = drain(
      makeFeed(
        ids,
        ids.map((_, i) => i),
      ),
      5,
    );
    expect(requests).toBeLessThanOrEqual(Math.ceil(4500 / 45) + 2);
  });
});

describe('a full page that also re-lists events at or below newer_than', () => {
  it('is still full: the cursor holds back D places instead of jumping to the largest id', () => {
    // 50 listed: 3 at or below the cursor (10), 47 above it, listed up to 5 places off id order.
    const above = Array.from({ length: 47 }, (_, i) => 11 + i);
    const step = nextCursor({ cursor: 10, seenAbove: [] }, above, 5, true);
    expect(step.cursor).toBe(above[47 - 1 - 5]);
    expect(step.seenAbove).toEqual(above.slice(47 - 5));
    // Before the fix the page counted as short (47 < 50) and the cursor jumped to 57.
    expect(nextCursor({ cursor: 10, seenAbove: [] }, above, 5).cursor).toBe(57);
  });
});

describe('observedDisorder', () => {
  it('measures the largest displacement from id order', () => {
    expect(observedDisorder([1, 2, 3]).disorder).toBe(0);
    expect(observedDisorder([3, 1, 2])).toEqual({ disorder: 2, eventId: 3 });
  });
});
