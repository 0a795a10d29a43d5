import type { Logger } from 'pino';
import type { QueueConfig } from '../../config/types.js';
import { errorMessage } from '../../errors.js';
import type { Change } from '../../pipeline/change.types.js';
import type { PipelineEvents } from '../../pipeline/events.js';
import type { Db } from '../../store/store.js';
import { classifyFailure, retryDelayMs } from '../delivery-policy.js';
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
const BATCH = 256;

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

  constructor(
    private readonly db: Db,
    private readonly sinks: SinkRuntime[],
    private readonly queue: QueueConfig,
    private readonly events: PipelineEvents,
    private readonly logger: Logger,
    private readonly backlog: Backlog,
  ) {}

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
       WHERE sink = @sink AND available_at <= @now AND NOT EXISTS (
         SELECT 1 FROM deliveries e WHERE e.sink = d.sink AND e.subject_key = d.subject_key AND e.id < d.id)
       ORDER BY id LIMIT @limit`,
    );
    const head = this.db.prepare(
      'SELECT id, key, subject_key, body, attempts, available_at FROM deliveries WHERE sink = ? ORDER BY id LIMIT 1',
    );
    const nextDue = this.db.prepare(
      'SELECT MIN(available_at) AS t FROM deliveries WHERE sink = ? AND available_at > ?',
    );
    let buffer: Row[] = [];
    let failedSinceFetch = false;

    while (!this.stopping || inflight.size > 0) {
      if (!this.stopping && inflight.size < this.queue.concurrency) {
        if (buffer.length === 0 || failedSinceFetch) {
          failedSinceFetch = false;
          const now = Date.now();
          if (strict) {
            const row = inflight.size === 0 ? (head.get(sink) as Row | undefined) : undefined;
            buffer = row && row.available_at <= now ? [row] : [];
          } else {
            buffer = (heads.all({ sink, now, limit: BATCH + inflight.size }) as Row[]).filter(
              (r) => !inflight.has(r.id),
            );
          }
        }
        while (buffer.length && inflight.size < this.queue.concurrency) {
          const row = buffer.shift()!;
          inflight.add(row.id);
          void this.deliver(runtime, row).then((failed) => {
            inflight.delete(row.id);
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

  /** Deliver one row; resolves true when it failed (so the loop refetches heads). */
  private async deliver(runtime: SinkRuntime, row: Row): Promise<boolean> {
    const started = performance.now();
    const change = JSON.parse(row.body) as Change;
    try {
      await runtime.sink.deliver(change);
      this.db.prepare('DELETE FROM deliveries WHERE id = ?').run(row.id);
      this.backlog.add(runtime.name, -1);
      this.events.emit('delivery:finished', {
        sink: runtime.name,
        outcome: 'ok',
        durationSeconds: (performance.now() - started) / 1000,
        endToEndSeconds: (Date.now() - Date.parse(change.occurred_at)) / 1000,
        key: row.key,
      });
      return false;
    } catch (err) {
      const failure = classifyFailure(err);
      const attempts = row.attempts + 1;
      const dead = failure.kind === 'never' || attempts >= this.queue.attempts;
      const message = errorMessage(err);
      if (dead) {
        this.db.transaction(() => {
          this.db
            .prepare(
              `INSERT OR REPLACE INTO dead_letters (sink, key, body, attempts, error, failed_at) VALUES (?, ?, ?, ?, ?, ?)`,
            )
            .run(runtime.name, row.key, row.body, attempts, message, Date.now());
          this.db.prepare('DELETE FROM deliveries WHERE id = ?').run(row.id);
        })();
        this.backlog.add(runtime.name, -1);
        this.logger.error(
          { sink: runtime.name, key: row.key, attempts, err: message },
          'delivery dead-lettered',
        );
      } else {
        const delay = retryDelayMs(attempts, this.queue, failure.retryAfterMs);
        this.db
          .prepare('UPDATE deliveries SET attempts = ?, available_at = ?, last_error = ? WHERE id = ?')
          .run(attempts, Date.now() + delay, message, row.id);
        this.logger.warn(
          { sink: runtime.name, key: row.key, attempts, retry_in_ms: Math.round(delay), err: message },
          'delivery failed; will retry',
        );
      }
      this.events.emit('delivery:finished', {
        sink: runtime.name,
        outcome: dead ? 'dead' : 'retry',
        durationSeconds: (performance.now() - started) / 1000,
        key: row.key,
        error: err,
      });
      return true;
    }
  }
}
