import { describe, expect, it } from 'vitest';
import { RecentKeys } from '../../src/sinks/recent-keys.js';

describe('RecentKeys', () => {
  it('forgets the oldest key once over capacity', () => {
    const keys = new RecentKeys(3);
    for (const k of ['a', 'b', 'c', 'd']) keys.add(k);
    expect(keys.has('a')).toBe(false);
    expect(['b', 'c', 'd'].every((k) => keys.has(k))).toBe(true);
    expect(keys.size).toBe(3);
  });

  it('does not count a repeated key twice', () => {
    const keys = new RecentKeys(2);
    keys.add('a');
    keys.add('a');
    keys.add('b');
    expect(keys.has('a')).toBe(true);
    expect(keys.size).toBe(2);
  });

  it('rejects a capacity that is not a positive integer', () => {
    expect(() => new RecentKeys(0)).toThrow(/positive integer/);
  });
});
