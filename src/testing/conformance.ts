// The conformance suite every sink passes: the built-in ones (test/sinks/*.test.ts) and, through
// `feedsync/testing`, sinks written outside this repository.
import { afterEach, describe, expect, it } from 'vitest';
import { NeverError, RetryLaterError } from '../core/errors.js';
import type { Sink } from '../sinks/sink.js';
import { makeChange } from './make-change.js';

export interface SinkHarness {
  /** Opens a new instance of the sink under test (the suite closes it). */
  open(): Promise<Sink>;
  /** Keys as the receiving system sees them, in arrival order, de-duplicated the way it does. */
  delivered(): Promise<string[]>;
  /** Makes the next deliveries fail in a way that can succeed later. */
  breakRetry?(): Promise<void>;
  /** Makes the next deliveries fail in a way that can never succeed. */
  breakNever?(): Promise<void>;
  /** Undoes breakRetry/breakNever; called after every test, so a no-op when nothing is broken. */
  heal?(): Promise<void>;
}

function count(keys: string[], key: string): number {
  return keys.filter((k) => k === key).length;
}

export function describeSinkConformance(name: string, harness: SinkHarness): void {
  describe(`${name}: sink conformance`, () => {
    let sink: Sink | undefined;
    const open = async (): Promise<Sink> => {
      sink = await harness.open();
      return sink;
    };

    afterEach(async () => {
      await harness.heal?.();
      await sink?.close();
      sink = undefined;
    });

    it('delivers 100 concurrent changes with distinct subjects', async () => {
      const s = await open();
      const changes = Array.from({ length: 100 }, () => makeChange());
      await Promise.all(changes.map((c) => s.deliver(c)));
      const got = await harness.delivered();
      for (const c of changes) expect(count(got, c.key), c.key).toBe(1);
    });

    it('keeps one logical copy of a change delivered twice, one after the other or at once', async () => {
      const s = await open();
      const again = makeChange();
      await s.deliver(again);
      await s.deliver(again);
      const atOnce = makeChange();
      await Promise.all([s.deliver(atOnce), s.deliver({ ...atOnce })]);
      const got = await harness.delivered();
      expect(count(got, again.key)).toBe(1);
      expect(count(got, atOnce.key)).toBe(1);
    });

    if (harness.breakRetry) {
      const breakRetry = harness.breakRetry;
      it('reports a transient failure as RetryLaterError and delivers once healed', async () => {
        const s = await open();
        const change = makeChange();
        await breakRetry();
        const err = await s.deliver(change).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(RetryLaterError);
        expect((err as Error).message).toContain(name);
        await harness.heal?.();
        await s.deliver(change);
        expect(count(await harness.delivered(), change.key)).toBe(1);
      });
    }

    if (harness.breakNever) {
      const breakNever = harness.breakNever;
      it('reports a permanent failure as NeverError', async () => {
        const s = await open();
        await breakNever();
        const err = await s.deliver(makeChange()).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(NeverError);
        expect((err as Error).message).toContain(name);
      });
    }

    it('closes cleanly and idempotently, keeping what it acknowledged', async () => {
      const s = await open();
      const change = makeChange();
      await s.deliver(change);
      await Promise.all([s.close(), s.close()]);
      await s.close();
      expect(count(await harness.delivered(), change.key)).toBe(1);
    });
  });
}
