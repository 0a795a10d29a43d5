// The per-source byte budget of subject bodies (src/pipeline/page-bytes.ts): what it grants, when
// it makes a request wait, whom it drops, and when it refuses a page.
import { describe, expect, it } from 'vitest';
import {
  ByteBudget,
  ClaimDroppedError,
  PageBudgetError,
  type Reservation,
} from '../../src/pipeline/page-bytes.js';

/** Whether a promise has settled after the pending microtasks ran. */
async function state<T>(p: Promise<T>): Promise<'pending' | 'resolved' | 'rejected'> {
  let s: 'pending' | 'resolved' | 'rejected' = 'pending';
  p.then(
    () => (s = 'resolved'),
    () => (s = 'rejected'),
  );
  for (let i = 0; i < 5; i++) await Promise.resolve();
  return s;
}

describe('ByteBudget', () => {
  it('grants up to its capacity, makes the next request wait, and serves it once bytes come back', async () => {
    const budget = new ByteBudget(100);
    const a = budget.open();
    const r1 = await a.reserve(60, 'one');
    const r2 = await a.reserve(40, 'two');
    expect(budget.used).toBe(100);
    const third = a.reserve(40, 'three');
    expect(await state(third)).toBe('pending');
    // A body smaller than its reservation gives the rest back at once.
    r1.keep(10);
    expect(await state(third)).toBe('resolved');
    expect(a.held).toBe(10);
    expect(budget.used).toBe(10 + 40 + 40);
    r2.cancel();
    expect(budget.used).toBe(50);
    a.release();
    expect(budget.used).toBe(0);
  });

  it('refuses a page that alone needs more than the budget, once its own fetches in flight have settled', async () => {
    const budget = new ByteBudget(100);
    const page = budget.open();
    const first = await page.reserve(60, 'event 1');
    const second = page.reserve(60, 'event 2');
    // Event 1's body may turn out small: wait for it rather than refuse.
    expect(await state(second)).toBe('pending');
    first.keep(55);
    await expect(second).rejects.toThrow(PageBudgetError);
    await expect(second).rejects.toThrow(
      /event 2 may need up to 60 bytes more.*holds 55 bytes.*max_page_bytes is 100/,
    );
  });

  it('lets the page read ahead wait for the page being committed, without refusing it', async () => {
    const budget = new ByteBudget(100);
    const current = budget.open();
    const held = await current.reserve(90, 'current');
    held.keep(90);
    let dropped = false;
    const ahead = budget.open({ speculative: true, onDrop: () => (dropped = true) });
    const wanted = ahead.reserve(50, 'ahead');
    expect(await state(wanted)).toBe('pending');
    current.release();
    expect(await state(wanted)).toBe('resolved');
    expect(dropped).toBe(false);
  });

  it('drops the page read ahead when the page that commits first needs its bytes', async () => {
    const budget = new ByteBudget(100);
    const current = budget.open();
    (await current.reserve(40, 'current 1')).keep(40);
    let dropped = 0;
    const ahead = budget.open({ speculative: true, onDrop: () => dropped++ });
    const aheadHeld = await ahead.reserve(60, 'ahead');
    const more = current.reserve(50, 'current 2');
    expect(await state(more)).toBe('resolved');
    expect(dropped).toBe(1);
    expect(ahead.dropped).toBe(true);
    await expect(ahead.reserve(1, 'after the drop')).rejects.toThrow(ClaimDroppedError);
    // Settling a reservation of a dropped claim changes nothing.
    aheadHeld.keep(60);
    expect(budget.used).toBe(90);
  });

  it('never drops a page read ahead once it was taken up for commit', async () => {
    const budget = new ByteBudget(100);
    let dropped = 0;
    const ahead = budget.open({ speculative: true, onDrop: () => dropped++ });
    (await ahead.reserve(80, 'ahead')).keep(80);
    ahead.promote();
    const later = budget.open();
    // The promoted page ranks before the later one: the later one waits for it.
    const wanted = later.reserve(50, 'later');
    expect(await state(wanted)).toBe('pending');
    expect(dropped).toBe(0);
    ahead.release();
    expect(await state(wanted)).toBe('resolved');
  });

  it('between two catch-up pages the younger gives way; one that cannot give way makes the older fail rather than deadlock', async () => {
    const budget = new ByteBudget(100);
    const older = budget.open({ onDrop: () => undefined });
    let youngerDropped = false;
    const younger = budget.open({ onDrop: () => (youngerDropped = true) });
    (await older.reserve(30, 'older 1')).keep(30);
    (await younger.reserve(60, 'younger 1')).keep(60);
    // The younger waits for the older (it will commit without it)...
    const youngerMore = younger.reserve(20, 'younger 2');
    expect(await state(youngerMore)).toBe('pending');
    // ...and the older, needing the younger's bytes, drops it instead of waiting for it.
    const olderMore = older.reserve(50, 'older 2');
    expect(await state(olderMore)).toBe('resolved');
    expect(youngerDropped).toBe(true);
    await expect(youngerMore).rejects.toThrow(ClaimDroppedError);

    const budget2 = new ByteBudget(100);
    const first = budget2.open();
    const second = budget2.open();
    (await first.reserve(30, 'first')).keep(30);
    (await second.reserve(60, 'second')).keep(60);
    await expect(first.reserve(50, 'first again')).rejects.toThrow(PageBudgetError);
  });

  it('refuses the waiting requests of a page when it is released', async () => {
    const budget = new ByteBudget(10);
    const page = budget.open();
    const r: Reservation = await page.reserve(10, 'one');
    const waiting = page.reserve(5, 'two');
    page.release();
    await expect(waiting).rejects.toThrow();
    r.keep(10);
    expect(budget.used).toBe(0);
  });

  it('serves pages in commit order: a later page never overtakes a waiting earlier one', async () => {
    const budget = new ByteBudget(100);
    const first = budget.open();
    const r = await first.reserve(100, 'first 1');
    const firstMore = first.reserve(30, 'first 2');
    const second = budget.open();
    const secondWants = second.reserve(20, 'second');
    r.keep(60);
    // 40 free: the first page's 30 come first, the second's 20 must wait for what is left.
    expect(await state(firstMore)).toBe('resolved');
    expect(await state(secondWants)).toBe('pending');
    first.release();
    expect(await state(secondWants)).toBe('resolved');
  });
});
