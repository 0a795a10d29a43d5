import type { Logger } from 'pino';
import type { QueueConfig } from '../../config/types.js';
import { errorMessage } from '../../core/errors.js';
import type { Change } from '../../core/change.js';
import type { PipelineEvents } from '../../core/events.js';
import type { Db } from '../../store/store.js';
import { decideAfterFailure } from '../delivery-policy.js';
import { reportDelivered, reportFailed } from '../delivery-report.js';
import type { DeliveryRunner, SinkRuntime } from '../queue.js';
import type { Backlog } from './backlog.js';

interface Row {
  id: number;
  key: string;
  subject_key: string;
  body: string;
  attempts: number;
  available_at: number;
}

const IDLE_RECHECK_MS = 1000;
/** When the sink's next retry is due. `available_at > 0` names the partial index's condition, so
 * SQLite searches the few retrying rows instead of scanning the whole backlog on every wake-up. */
export const NEXT_RETRY_DUE =
  'SELECT MIN(available_at) AS t FROM deliveries WHERE sink = ? AND available_at > 0 AND available_at > ?';
/** Changes per call to a sink that takes batches, and rows fetched per look at the queue. */
const BATCH = 200;

/**
 * Delivers the embedded queue to the sinks: one loop per sink, `concurrency` deliveries in flight.
 * Order: only the oldest undelivered row of each subject is ever eligible, so two changes of one
 * subject are never in flight together and a retrying change holds back its successors. With
 * concurrency 1 the sink gets strict queue order (a retrying change holds back everything).
 */
export class LocalDelivery implements DeliveryRunner {
  private stopping = false;
  private readonly loops: Promise<void>[] = [];
  private readonly wakers = new Set<() => void>();
  private readonly inflight = new Map<string, Set<number>>();
  /** Sink calls in flight (a batch is one call). */
  private readonly calls = new Map<string, number>();

  private busy(sink: string): number {
    return this.calls.get(sink) ?? 0;
  }

  private readonly ack;
  private readonly bury;
  private readonly retry;

  constructor(
    private readonly db: Db,
    private readonly sinks: SinkRuntime[],
    private readonly queue: QueueConfig,
    private readonly events: PipelineEvents,
    private readonly logger: Logger,
    private readonly backlog: Backlog,
  ) {
    this.ack = db.prepare('DELETE FROM deliveries WHERE id = ?');
    this.bury = db.prepare(
      'INSERT OR REPLACE INTO dead_letters (sink, key, body, attempts, error, failed_at) VALUES (?, ?, ?, ?, ?, ?)',
    );
    this.retry = db.prepare(
      'UPDATE deliveries SET attempts = ?, available_at = ?, last_error = ? WHERE id = ?',
    );
  }

  /** New rows were queued: look again now rather than at the next idle re-check. */
  wake(): void {
    for (const w of this.wakers) w();
  }

  inFlightCounts(): Map<string, number> {
    return new Map([...this.inflight].map(([sink, ids]) => [sink, ids.size]));
  }

  async start(): Promise<void> {
    for (const sink of this.sinks) this.loops.push(this.loop(sink));
  }

  async stop(timeoutMs: number): Promise<void> {
    this.stopping = true;
    this.wake();
    // In-flight deliveries that do not finish in time stay queued and are redelivered next start.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(this.loops),
      new Promise((r) => {
        timer = setTimeout(r, timeoutMs);
        timer.unref();
      }),
    ]);
    clearTimeout(timer);
  }

  private async loop(runtime: SinkRuntime): Promise<void> {
    const sink = runtime.name;
    const inflight = new Set<number>();
    this.inflight.set(sink, inflight);
    const strict = this.queue.concurrency === 1;
    const heads = this.db.prepare(
      `SELECT id, key, subject_key, body, attempts, available_at FROM deliveries d
       WHERE sink = @sink AND available_at <= @now
         AND id NOT IN (SELECT value FROM json_each(@inflight)) AND NOT EXISTS (
         SELECT 1 FROM deliveries e WHERE e.sink = d.sink AND e.subject_key = d.subject_key AND e.id < d.id)
       ORDER BY id LIMIT @limit`,
    );
    const queueHead = this.db.prepare(
      'SELECT id, key, subject_key, body, attempts, available_at FROM deliveries WHERE sink = ? ORDER BY id LIMIT ?',
    );
    const nextDue = this.db.prepare(NEXT_RETRY_DUE);
    // A sink that takes batches gets up to BATCH changes per call, one call counting as one
    // delivery in flight; others get one change per call.
    const perCall = runtime.sink.deliverBatch ? BATCH : 1;
    let buffer: Row[] = [];
    let failedSinceFetch = false;

    while (!this.stopping || inflight.size > 0) {
      if (!this.stopping && this.busy(sink) < this.queue.concurrency) {
        if (buffer.length === 0 || failedSinceFetch) {
          failedSinceFetch = false;
          const now = Date.now();
          buffer = strict
            ? inflight.size === 0
              ? strictPrefix(queueHead.all(sink, perCall) as Row[], now)
              : []
            : // Rows in flight are left out in SQL: while the sink keeps up, every look at the
              // queue would otherwise read the bodies of up to `concurrency` batches again.
              (heads.all({
                sink,
                now,
                limit: BATCH * this.queue.concurrency,
                inflight: JSON.stringify([...inflight]),
              }) as Row[]);
        }
        while (buffer.length && this.busy(sink) < this.queue.concurrency) {
          const rows = buffer.splice(0, perCall);
          for (const r of rows) inflight.add(r.id);
          this.calls.set(sink, this.busy(sink) + 1);
          void this.deliver(runtime, rows).then((failed) => {
            for (const r of rows) inflight.delete(r.id);
            this.calls.set(sink, this.busy(sink) - 1);
            if (failed) failedSinceFetch = true;
            this.wake();
          });
        }
      }
      const due = nextDue.get(sink, Date.now()) as { t: number | null };
      const wait = due.t ? Math.min(IDLE_RECHECK_MS, Math.max(5, due.t - Date.now())) : IDLE_RECHECK_MS;
      // Woken early by new rows (producer) or by a delivery finishing.
      await this.idle(this.stopping ? 50 : wait);
    }
  }

  private idle(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wakers.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wakers.add(done);
    });
  }

  /** Deliver rows in one sink call; resolves true when it failed (so the loop refetches heads). */
  private async deliver(runtime: SinkRuntime, rows: Row[]): Promise<boolean> {
    const started = performance.now();
    const changes = rows.map((r) => JSON.parse(r.body) as Change);
    try {
      if (changes.length === 1 || !runtime.sink.deliverBatch) await runtime.sink.deliver(changes[0]!);
      else await runtime.sink.deliverBatch(changes);
    } catch (err) {
      this.record(runtime, rows, () => this.failed(runtime, rows, err, (performance.now() - started) / 1000));
      return true;
    }
    // If the store cannot take the acknowledgement (disk full), the rows stay queued and are
    // delivered again later: the sinks drop the duplicate by key.
    if (
      !this.record(runtime, rows, () => this.db.transaction(() => rows.forEach((r) => this.ack.run(r.id)))())
    )
      return true;
    this.backlog.add(runtime.name, -rows.length);
    reportDelivered(this.events, runtime.name, changes, (performance.now() - started) / 1000);
    return false;
  }

  /** Run a store write about delivered rows; a store that cannot take it is logged, never fatal. */
  private record(runtime: SinkRuntime, rows: Row[], write: () => void): boolean {
    try {
      write();
      return true;
    } catch (err) {
      this.logger.error(
        { sink: runtime.name, keys: rows.length, err: errorMessage(err) },
        'cannot record a delivery outcome in the store; the changes stay queued',
      );
      return false;
    }
  }

  private failed(runtime: SinkRuntime, rows: Row[], err: unknown, durationSeconds: number): void {
    const message = errorMessage(err);
    const now = Date.now();
    const report = { events: this.events, logger: this.logger, sink: runtime.name };
    let dead = 0;
    this.db.transaction(() => {
      for (const row of rows) {
        const decision = decideAfterFailure(err, row.attempts, this.queue);
        if (decision.outcome === 'dead') {
          this.bury.run(runtime.name, row.key, row.body, decision.attempts, message, now);
          this.ack.run(row.id);
          dead++;
        } else this.retry.run(decision.attempts, now + decision.delayMs, message, row.id);
        reportFailed(report, row.key, decision, err, durationSeconds);
      }
    })();
    this.backlog.add(runtime.name, -dead);
  }
}

/** Strict order: the queue's head rows that are due, stopping at the first that is not or at a repeated subject. */
function strictPrefix(rows: Row[], now: number): Row[] {
  const subjects = new Set<string>();
  const out: Row[] = [];
  for (const r of rows) {
    if (r.available_at > now || subjects.has(r.subject_key)) break;
    subjects.add(r.subject_key);
    out.push(r);
  }
  return out;
}
