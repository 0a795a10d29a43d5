// The per-sink activity the console charts: deliveries and failures per minute over the last hour,
// moved along by the clock, and the last errors, bounded in number and length.
import { describe, expect, it } from 'vitest';
import { watchActivity } from '../../src/admin/activity.js';
import { PipelineEvents } from '../../src/core/events.js';

describe('watchActivity', () => {
  it('counts changes per minute, shifting the hour as minutes pass, and keeps the last 10 errors cut short', () => {
    let now = Date.UTC(2026, 10, 27, 12, 0, 30);
    const events = new PipelineEvents();
    const log = watchActivity(events, ['hook'], () => now);
    const finish = (outcome: 'ok' | 'retry' | 'dead', n: number, error?: unknown) =>
      events.emit('delivery:finished', {
        sink: 'hook',
        outcome,
        durationSeconds: 0.1,
        changes: Array.from({ length: n }, (_, i) => ({ key: `s:${i}` })),
        error,
      });
    finish('ok', 3);
    finish('retry', 1, new Error('boom'));
    now += 60_000;
    finish('ok', 2);
    now += 2 * 60_000;
    events.emit('sink:failing', { sink: 'hook', failing: true });
    events.emit('delivery:finished', { sink: 'other', outcome: 'ok', durationSeconds: 0, changes: [] });
    const [hook] = log.read();
    expect(hook!.delivered_per_minute).toHaveLength(60);
    expect(hook!.delivered_per_minute.slice(-4)).toEqual([3, 2, 0, 0]);
    expect(hook!.failed_per_minute.slice(-4)).toEqual([1, 0, 0, 0]);
    expect(hook!.failing).toBe(true);
    expect(hook!.recent_errors).toEqual([
      { at: '2026-11-27T12:00:30.000Z', outcome: 'retry', error: 'boom' },
    ]);

    for (let i = 0; i < 12; i++) finish('dead', 1, new Error(`${i}:${'x'.repeat(2000)}`));
    const errors = log.read()[0]!.recent_errors;
    expect(errors.map((e) => e.error.split(':')[0])).toEqual([
      '2',
      '3',
      '4',
      '5',
      '6',
      '7',
      '8',
      '9',
      '10',
      '11',
    ]);
    for (const e of errors) expect(e.error.length).toBeLessThan(600);
    // An hour and more later, the whole window is new.
    now += 61 * 60_000;
    expect(log.read()[0]!.delivered_per_minute.every((n) => n === 0)).toBe(true);
    log.close();
    finish('ok', 5);
    expect(log.read()[0]!.delivered_per_minute.at(-1)).toBe(0);
  });
});
