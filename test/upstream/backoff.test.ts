import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { backoffDelay, parseRetryAfter, sleep, surelyGrowingDelay } from '../../src/backoff.js';

describe('surelyGrowingDelay', () => {
  it('lies in [ceiling/2, ceiling], so every retry waits at least half the ceiling (property)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 60 }),
        fc.integer({ min: 1, max: 10_000 }),
        fc.integer({ min: 1, max: 1_000_000 }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        (attempt, base, max, r) => {
          const d = surelyGrowingDelay(attempt, base, max, () => r);
          const ceiling = Math.min(max, base * 2 ** attempt);
          return Number.isInteger(d) && d >= Math.floor(ceiling / 2) && d <= ceiling;
        },
      ),
    );
    expect(surelyGrowingDelay(3, 100, 60_000, () => 0)).toBe(400);
  });
});

describe('backoffDelay', () => {
  it('spans [0, base * 2^attempt] with full jitter', () => {
    expect(backoffDelay(0, 200, 30_000, () => 0)).toBe(0);
    expect(backoffDelay(0, 200, 30_000, () => 0.999999)).toBe(199);
    expect(backoffDelay(3, 200, 30_000, () => 0.5)).toBe(800);
  });

  it('is capped at maxMs, even for absurd attempts', () => {
    expect(backoffDelay(10, 200, 30_000, () => 1)).toBe(30_000);
    expect(backoffDelay(5000, 200, 30_000, () => 1)).toBe(30_000);
  });

  it('always lies within bounds (property)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2000 }),
        fc.integer({ min: 0, max: 10_000 }),
        fc.integer({ min: 0, max: 1_000_000 }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        (attempt, base, max, r) => {
          const d = backoffDelay(attempt, base, max, () => r);
          const ceiling = base === 0 ? 0 : Math.min(max, base * 2 ** attempt);
          return Number.isInteger(d) && d >= 0 && d <= ceiling;
        },
      ),
    );
  });
});

describe('sleep', () => {
  it('resolves true after the delay', async () => {
    const t0 = Date.now();
    expect(await sleep(30)).toBe(true);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(25);
  });

  it('resolves false promptly when aborted during the wait, and at once when already aborted', async () => {
    const ac = new AbortController();
    const t0 = Date.now();
    setTimeout(() => ac.abort(), 20);
    expect(await sleep(10_000, ac.signal)).toBe(false);
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(await sleep(10_000, ac.signal)).toBe(false);
  });
});

describe('parseRetryAfter', () => {
  const now = Date.parse('2026-11-20T10:00:00Z');

  it('reads delta-seconds', () => {
    expect(parseRetryAfter('3', 60_000, now)).toBe(3000);
    expect(parseRetryAfter(' 0 ', 60_000, now)).toBe(0);
    expect(parseRetryAfter(['2', '9'], 60_000, now)).toBe(2000);
  });

  it('reads an HTTP-date relative to now; past dates mean 0', () => {
    expect(parseRetryAfter('Fri, 20 Nov 2026 10:00:05 GMT', 60_000, now)).toBe(5000);
    expect(parseRetryAfter('Fri, 20 Nov 2026 09:00:00 GMT', 60_000, now)).toBe(0);
  });

  it('caps long waits', () => {
    expect(parseRetryAfter('86400', 60_000, now)).toBe(60_000);
    expect(parseRetryAfter('Sat, 21 Nov 2026 10:00:00 GMT', 60_000, now)).toBe(60_000);
  });

  it.each([undefined, '', 'soon', '-5', '1.5', '+3', []])('is undefined for %j', (value) => {
    expect(parseRetryAfter(value as string | string[] | undefined, 60_000, now)).toBeUndefined();
  });
});
