import { describe, expect, it } from 'vitest';
import { createLogRate } from '../../src/observability/log-rate.js';

describe('log rate', () => {
  it('admits the first occurrence, then one per interval carrying the count left out since', () => {
    let now = 0;
    const rate = createLogRate({ intervalMs: 60_000, now: () => now });
    expect(rate.admit('a')).toEqual({ repeated: 0 });
    for (let i = 0; i < 500; i++) {
      now += 100;
      expect(rate.admit('a')).toBeUndefined();
    }
    now = 60_000;
    expect(rate.admit('a')).toEqual({ repeated: 500 });
    now += 1;
    expect(rate.admit('a')).toBeUndefined();
    now += 60_000;
    expect(rate.admit('a')).toEqual({ repeated: 1 });
    // Nothing left out since: the next line after a quiet minute says so.
    now += 60_000;
    expect(rate.admit('a')).toEqual({ repeated: 0 });
  });

  it('limits each key on its own', () => {
    let now = 0;
    const rate = createLogRate({ intervalMs: 1000, now: () => now });
    expect(rate.admit('a')).toEqual({ repeated: 0 });
    expect(rate.admit('b')).toEqual({ repeated: 0 });
    expect(rate.admit('a')).toBeUndefined();
    now = 500;
    expect(rate.admit('c')).toEqual({ repeated: 0 });
    expect(rate.admit('b')).toBeUndefined();
  });

  it('drains the counts not logged yet (for a last line at shutdown), once', () => {
    const rate = createLogRate({ intervalMs: 60_000, now: () => 0 });
    rate.admit('a');
    rate.admit('a');
    rate.admit('a');
    rate.admit('b');
    expect(rate.drain()).toEqual([{ key: 'a', repeated: 2 }]);
    expect(rate.drain()).toEqual([]);
  });

  it('forgets the stalest key beyond maxKeys (error texts can vary without bound)', () => {
    let now = 0;
    const rate = createLogRate({ intervalMs: 60_000, maxKeys: 2, now: () => now });
    rate.admit('a');
    now = 1;
    rate.admit('b');
    now = 2;
    rate.admit('c');
    // 'a' was forgotten: it is logged again at once; 'c' is still remembered.
    expect(rate.admit('a')).toEqual({ repeated: 0 });
    expect(rate.admit('c')).toBeUndefined();
  });
});
