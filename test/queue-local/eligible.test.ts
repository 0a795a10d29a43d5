// The local queue's one per-subject rule (`eligible` in src/queue/local/delivery.ts), which both
// the memory queue and the store path use, checked against its definition on random queues.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { eligible } from '../../src/queue/local/delivery.js';

interface R {
  id: number;
  subject_key: string;
  available_at: number;
}

const NOW = 1_000;
const rowsArb = fc
  .array(fc.record({ s: fc.integer({ min: 0, max: 5 }), due: fc.boolean() }), { maxLength: 30 })
  .map((xs) =>
    xs.map((x, i): R => ({ id: i + 1, subject_key: `s${x.s}`, available_at: x.due ? 0 : NOW + 1 })),
  );
const busyArb = fc
  .uniqueArray(fc.integer({ min: 0, max: 5 }), { maxLength: 3 })
  .map((xs) => new Set(xs.map((x) => `s${x}`)));

describe('eligible: the per-subject rule of the local queue', () => {
  it('takes, in id order, only the oldest row of a subject not in flight, when due, up to max', () => {
    fc.assert(
      fc.property(rowsArb, busyArb, fc.integer({ min: 1, max: 10 }), (rows, busy, max) => {
        const taken = eligible(rows, false, busy, NOW, max);
        expect(taken.length).toBeLessThanOrEqual(max);
        const ids = taken.map((r) => r.id);
        expect(ids).toEqual([...ids].sort((a, b) => a - b));
        for (const r of taken) {
          expect(busy.has(r.subject_key)).toBe(false);
          expect(r.available_at).toBeLessThanOrEqual(NOW);
          // No older row of its subject exists (due or not): it is the subject's head.
          expect(rows.some((o) => o.subject_key === r.subject_key && o.id < r.id)).toBe(false);
        }
        // Maximal: a row left out while there was room is busy, not due, or not its subject's head.
        const cut = taken.length < max ? rows : rows.filter((r) => r.id < taken.at(-1)!.id);
        for (const r of cut)
          if (!taken.includes(r))
            expect(
              busy.has(r.subject_key) ||
                r.available_at > NOW ||
                rows.some((o) => o.subject_key === r.subject_key && o.id < r.id),
            ).toBe(true);
      }),
    );
  });

  it('strict: nothing while a row is in flight, else the head up to the first row not due or repeating a subject', () => {
    fc.assert(
      fc.property(rowsArb, busyArb, fc.integer({ min: 1, max: 10 }), (rows, busy, max) => {
        const taken = eligible(rows, true, busy, NOW, max);
        if (busy.size > 0) {
          expect(taken).toEqual([]);
          return;
        }
        let n = 0;
        const seen = new Set<string>();
        while (n < rows.length && n < max && rows[n]!.available_at <= NOW && !seen.has(rows[n]!.subject_key))
          seen.add(rows[n++]!.subject_key);
        expect(taken).toEqual(rows.slice(0, n));
      }),
    );
  });

  it('a retrying row holds back its own subject only', () => {
    const rows: R[] = [
      { id: 1, subject_key: 'a', available_at: NOW + 5 },
      { id: 2, subject_key: 'b', available_at: 0 },
      { id: 3, subject_key: 'a', available_at: 0 },
      { id: 4, subject_key: 'c', available_at: 0 },
    ];
    expect(eligible(rows, false, new Set(), NOW, 10).map((r) => r.id)).toEqual([2, 4]);
    expect(eligible(rows, true, new Set(), NOW, 10)).toEqual([]);
  });
});
