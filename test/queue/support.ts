// Helpers for tests that open a queue driver directly (no daemon, no upstream): a config, changes,
// a recording sink.
import { join } from 'node:path';
import { validateConfig } from '../../src/config/load.js';
import type { FeedsyncConfig } from '../../src/config/types.js';
import type { Change } from '../../src/core/change.js';
import type { Sink } from '../../src/sinks/sink.js';
import { makeChange as buildChange } from '../../src/testing/make-change.js';

/** A valid config: one unreachable source (never polled here) and a jsonl entry per sink name. */
export function driverConfig(
  dir: string,
  sinkNames: string[],
  queue: Record<string, unknown> = {},
): FeedsyncConfig {
  return validateConfig(
    {
      store: { path: join(dir, 'store.db') },
      queue: { attempts: 4, backoff_ms: 5, max_backoff_ms: 20, concurrency: 4, ...queue },
      sources: [
        { name: 'src', service: 'workflow', base_url: 'http://127.0.0.1:9', username: 'u', password: 'p' },
      ],
      sinks: sinkNames.map((name) => ({ name, type: 'jsonl', path: join(dir, `${name}.jsonl`) })),
      http: { host: '127.0.0.1', port: 0 },
    },
    { dir },
  );
}

/** The subject URL of job `subject`, on the config's unreachable source. */
export function jobUrl(subject: string | number): string {
  return `http://127.0.0.1:9/api/jobs/${subject}`;
}

/**
 * A change of source `src` about job `subject`, with `eventId` or a fresh event id (unique within
 * the test process, increasing in build order). It occurred a second ago: the conformance suite expects an
 * end-to-end time of at least a second.
 */
export function makeChange(subject: string | number, eventId?: number): Change {
  return buildChange({
    ...(eventId === undefined ? {} : { event_id: eventId }),
    source: 'src',
    occurred_at: new Date(Date.now() - 1_000).toISOString(),
    subject_url: jobUrl(subject),
    subject_state: 'skipped',
  });
}

/** The error a recording sink throws for this attempt at this change, if any. */
export type FailurePlan = (change: Change, attempt: number) => Error | undefined;

/**
 * A sink that records every successful delivery in order, counts attempts per key, can be told to
 * fail (RetryLaterError / NeverError / anything) and to take time, and checks that no two changes
 * of one subject are ever in flight at once. With `batches` it also takes deliverBatch calls, each
 * change of a batch delivered (and counted, and failed) on its own.
 */
export class RecordingSink implements Sink {
  readonly delivered: Change[] = [];
  readonly attempts = new Map<string, number>();
  readonly overlaps: string[] = [];
  protected readonly inFlight = new Map<string, number>();
  closed = false;

  constructor(
    protected readonly plan: { fail?: FailurePlan; latencyMs?: () => number; batches?: boolean } = {},
    /** Shared between sinks standing for the same sink in different processes. */
    protected readonly shared?: SharedRecord,
  ) {
    if (plan.batches)
      this.deliverBatch = async (changes) => {
        for (const c of changes) await this.deliver(c);
      };
  }

  deliverBatch?(changes: Change[]): Promise<void>;

  /** Mark the change's subject in flight (recording an overlap if it already was); returns the unmark. */
  protected enter(change: Change): () => void {
    const subject = change.subject_url ?? change.key;
    const inFlight = this.shared?.inFlight ?? this.inFlight;
    const overlaps = this.shared?.overlaps ?? this.overlaps;
    if ((inFlight.get(subject) ?? 0) > 0) overlaps.push(`${subject} (${change.key})`);
    inFlight.set(subject, (inFlight.get(subject) ?? 0) + 1);
    return () => inFlight.set(subject, (inFlight.get(subject) ?? 1) - 1);
  }

  async deliver(change: Change): Promise<void> {
    const leave = this.enter(change);
    try {
      const attempt = (this.attempts.get(change.key) ?? 0) + 1;
      this.attempts.set(change.key, attempt);
      const latency = this.plan.latencyMs?.() ?? 0;
      if (latency > 0) await new Promise((r) => setTimeout(r, latency));
      const failure = this.plan.fail?.(change, attempt);
      if (failure) throw failure;
      this.delivered.push(change);
      this.shared?.log.push(change);
    } finally {
      leave();
    }
  }

  keys(): string[] {
    return this.delivered.map((c) => c.key);
  }

  async close(): Promise<void> {
    this.closed = true;
  }
}

export interface SharedRecord {
  inFlight: Map<string, number>;
  overlaps: string[];
  log: Change[];
}
