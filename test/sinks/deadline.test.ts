// A sink call that never settles must not hold its delivery slot forever (issue: a module sink
// whose deliver never settles held a shard or a lane for good).
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { RetryLaterError } from '../../src/core/errors.js';
import { withDeliveryDeadline } from '../../src/sinks/deadline.js';
import type { Sink } from '../../src/sinks/sink.js';
import { makeChange } from './support/make-change.js';

function recordingLogger() {
  const lines: Record<string, unknown>[] = [];
  const logger = pino(
    { level: 'warn' },
    { write: (s: string) => lines.push(JSON.parse(s) as Record<string, unknown>) },
  );
  return { logger, lines };
}

describe('delivery deadline', () => {
  it('fails a deliver() that never settles as retry-later, naming the sink and the limit', async () => {
    const never: Sink = { deliver: () => new Promise<void>(() => undefined), close: async () => undefined };
    const { logger } = recordingLogger();
    const sink = withDeliveryDeadline(never, 'hook', 50, logger);
    const started = Date.now();
    const err = await sink.deliver(makeChange()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RetryLaterError);
    expect(String((err as Error).message)).toMatch(
      /sink "hook": deliver\(.*\) did not settle within queue\.delivery_timeout_ms \(50 ms\)/,
    );
    expect(Date.now() - started).toBeLessThan(1000);
  });

  it("aborts the call's context.signal at the deadline, so a sink that honours it stops instead of finishing late", async () => {
    let aborted: unknown;
    let finishedLate = false;
    const cooperative: Sink = {
      deliver: (_change, context) =>
        new Promise<void>((resolve, reject) => {
          const timer = setTimeout(() => {
            finishedLate = true;
            resolve();
          }, 300);
          context?.signal?.addEventListener('abort', () => {
            clearTimeout(timer);
            aborted = context.signal?.reason;
            reject(context.signal?.reason as Error);
          });
        }),
      close: async () => undefined,
    };
    const { logger, lines } = recordingLogger();
    const sink = withDeliveryDeadline(cooperative, 'mod', 50, logger);
    await expect(sink.deliver(makeChange(), { fence: undefined })).rejects.toBeInstanceOf(RetryLaterError);
    await new Promise((r) => setTimeout(r, 400));
    expect(String((aborted as Error).message)).toMatch(/delivery_timeout_ms \(50 ms\) passed/);
    expect(finishedLate).toBe(false);
    expect(lines.filter((l) => /finished after its deadline/.test(String(l.msg)))).toEqual([]);
  });

  it('bounds deliverBatch too, and says so when a timed-out call completes after all', async () => {
    let finish!: () => void;
    const late: Sink = {
      deliver: async () => undefined,
      deliverBatch: () => new Promise<void>((r) => (finish = r)),
      close: async () => undefined,
    };
    const { logger, lines } = recordingLogger();
    const sink = withDeliveryDeadline(late, 'mirror', 30, logger);
    await expect(sink.deliverBatch!([makeChange(), makeChange()])).rejects.toThrow(/did not settle within/);
    finish();
    await new Promise((r) => setTimeout(r, 10));
    expect(lines.map((l) => l.msg)).toContain(
      'a sink call finished after its deadline; the change may be delivered twice',
    );
  });

  it('passes results, errors and synchronous throws through untouched', async () => {
    const { logger, lines } = recordingLogger();
    const ok = withDeliveryDeadline(
      { deliver: async () => undefined, close: async () => undefined },
      's',
      1000,
      logger,
    );
    await expect(ok.deliver(makeChange())).resolves.toBeUndefined();
    const throwing = withDeliveryDeadline(
      {
        deliver: () => {
          throw new Error('boom');
        },
        close: async () => undefined,
      },
      's',
      1000,
      logger,
    );
    await expect(throwing.deliver(makeChange())).rejects.toThrow('boom');
    expect(ok.deliverBatch).toBeUndefined();
    expect(lines).toEqual([]);
  });
});
