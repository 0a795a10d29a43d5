// A slice job's data: written from the changes' JSON texts, read back into changes that keep their
// text, so a change is serialised once on its way through scaled mode (issue 29, item 4).
import { afterEach, describe, expect, it, vi } from 'vitest';
import { changeJson } from '../../src/core/change-json.js';
import type { Change } from '../../src/core/change.js';
import { readSlice, SliceJob, type ChangeSlice } from '../../src/queue/bullmq/slice.js';
import { makeChange } from './support.js';

// Serialising and reading a job reach no Redis: what the Job constructor takes from its queue.
const queue = {
  name: 'slice-data',
  qualifiedName: 'bull:slice-data',
  toKey: (type: string) => `bull:slice-data:${type}`,
  opts: {},
} as unknown as ConstructorParameters<typeof SliceJob>[0];
afterEach(() => vi.restoreAllMocks());

/** The job's data as Redis stores it and hands it back: the text of the bytes BullMQ sends. */
function dataOf(changes: Change[]): string {
  const data: unknown = new SliceJob(queue, 'slice', { changes }).asJSON().data;
  expect(Buffer.isBuffer(data), 'sent as bytes').toBe(true);
  return (data as Buffer).toString('utf8');
}

function withSubject(id: number, subject: unknown): Change {
  return { ...makeChange(id), subject } as Change;
}

describe('slice job data', () => {
  const changes = [
    makeChange(1),
    // Texts whose JSON holds the separators the reader cuts at, and characters that are more than
    // one UTF-8 byte or two UTF-16 units.
    withSubject(2, { note: 'a],"lengths":[1,2]} and "quotes", commas,', lengths: [3, 4] }),
    withSubject(3, { title: 'Ünïcödé 🎬 — 日本語', broken: '\ud800 lone surrogate' }),
    makeChange(4, { subject: 's4' }),
  ];

  it('is valid JSON of the slice: any reader sees the changes (and their lengths)', () => {
    const parsed = JSON.parse(dataOf(changes)) as { changes: Change[]; lengths: number[] };
    expect(parsed.changes).toEqual(JSON.parse(JSON.stringify(changes)));
    expect(parsed.lengths).toEqual(changes.map((c) => JSON.stringify(c).length));
  });

  it('is exactly the texts of the changes, comma-joined, then their lengths in UTF-16 units', () => {
    for (const some of [changes, [changes[2]!]]) {
      const texts = some.map((c) => JSON.stringify(c));
      expect(dataOf(some)).toBe(
        `{"changes":[${texts.join(',')}],"lengths":[${texts.map((t) => t.length).join(',')}]}`,
      );
    }
  });

  it('reads back the same changes, each keeping its text: no change is serialised again', () => {
    const data = dataOf(changes);
    const read = readSlice(data) as ChangeSlice;
    expect(read.changes).toEqual(JSON.parse(JSON.stringify(changes)));
    const stringify = vi.spyOn(JSON, 'stringify');
    const texts = read.changes.map(changeJson);
    expect(stringify).not.toHaveBeenCalled();
    expect(texts).toEqual(changes.map((c) => JSON.stringify(c)));
  });

  it('is what a BullMQ job read by SliceJob.fromJSON carries', () => {
    const json = { ...new SliceJob(queue, 'slice', { changes }).asJSON(), data: dataOf(changes) };
    const job = SliceJob.fromJSON<ChangeSlice>(queue, json, 'id-1');
    expect(job).toBeInstanceOf(SliceJob);
    expect(job.id).toBe('id-1');
    expect(job.data.changes.map((c) => c.key)).toEqual(changes.map((c) => c.key));
  });

  it('parses whole what it did not write: an earlier slice, lengths that do not fit', () => {
    const texts = changes.map((c) => JSON.stringify(c));
    const earlier = `{"changes":[${texts.join(',')}]}`;
    expect(readSlice(earlier)).toEqual(JSON.parse(earlier));
    expect(readSlice(undefined)).toEqual({});
    const wrong = [
      // One unit short, one long, a length of 0, not a number, too few, too many.
      texts.map((t, i) => (i === 1 ? t.length - 1 : t.length)),
      texts.map((t, i) => (i === 1 ? t.length + 1 : t.length)),
      [0, ...texts.slice(1).map((t) => t.length)],
      ['x', ...texts.slice(1).map((t) => t.length)],
      texts.slice(1).map((t) => t.length),
      [...texts.map((t) => t.length), 5],
    ];
    for (const lengths of wrong) {
      const data = `{"changes":[${texts.join(',')}],"lengths":[${lengths.map((l) => JSON.stringify(l)).join(',')}]}`;
      expect(readSlice(data), `lengths ${JSON.stringify(lengths)}`).toEqual(JSON.parse(data));
    }
  });
});
