// Helpers for tests that open a queue driver directly (no daemon, no upstream): a config, changes,
// a recording sink.
import { join } from 'node:path';
import { validateConfig } from '../../src/config/load.js';
import type { FeedsyncConfig } from '../../src/config/types.js';
import type { Change } from '../../src/core/change.js';
import type { Sink } from '../../src/sinks/sink.js';

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

let nextEventId = 1;

/** A change of `subject` with a fresh event id (unique within the test process). */
export function makeChange(subject: string | number): Change {
  const id = nextEventId++;
  return {
    schema: 'feedsync.change.v1',
    key: `src:${id}`,
    source: 'src',
    service: 'workflow',
    event_id: id,
    event_type: 'job_updated',
    resource_type: 'job',
    operation: 'updated',
    occurred_at: new Date(Date.now() - 1_000).toISOString(),
    changes: ['name'],
    event_url: null,
    subject_url: `http://127.0.0.1:9/api/jobs/${subject}`,
    subject_state: 'skipped',
    subject: null,
    source_rule: null,
  };
}

type FailurePlan = (change: Change, attempt: number) => Error | undefined;

/**
 * Records successful deliveries in order and attempts per key; fails on demand; notes any two
 * changes of one subject in flight together. With `batches` it also takes deliverBatch calls.
 */
export class RecordingSink implements Sink {
  readonly delivered: Change[] = [];
  readonly attempts = new Map<string, number>();
  readonly overlaps: string[] = [];
  private readonly inFlight = new Set<string>();
  deliverBatch?: (changes: Change[]) => Promise<void>;

  constructor(
    private readonly plan: { fail?: FailurePlan; latencyMs?: () => number; batches?: boolean } = {},
  ) {
    if (plan.batches)
      this.deliverBatch = async (changes) => {
        for (const c of changes) await this.deliver(c);
      };
  }

  async deliver(change: Change): Promise<void> {
    const subject = change.subject_url ?? change.key;
    if (this.inFlight.has(subject)) this.overlaps.push(change.key);
    this.inFlight.add(subject);
    try {
      const attempt = (this.attempts.get(change.key) ?? 0) + 1;
      this.attempts.set(change.key, attempt);
      const latency = this.plan.latencyMs?.() ?? 0;
      if (latency > 0) await new Promise((r) => setTimeout(r, latency));
      const failure = this.plan.fail?.(change, attempt);
      if (failure) throw failure;
      this.delivered.push(change);
    } finally {
      this.inFlight.delete(subject);
    }
  }

  keys(): string[] {
    return this.delivered.map((c) => c.key);
  }

  async close(): Promise<void> {}
}
