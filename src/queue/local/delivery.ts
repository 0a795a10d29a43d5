import type { Logger } from 'pino';
import type { QueueConfig } from '../../config/types.js';
import { parseChangeJson } from '../../core/change-json.js';
import { errorMessage } from '../../core/errors.js';
import type { PipelineEvents } from '../../core/events.js';
import type { Db } from '../../store/store.js';
import { decideAfterFailure } from '../delivery-policy.js';
import { reportDelivered, reportFailed } from '../delivery-report.js';
import type { DeliveryRunner, SinkRuntime } from '../queue.js';
import type { Backlog } from './backlog.js';
import type { QueuedSlices } from './producer.js';
import type { QueuedRow as Row } from './rows.js';

const IDLE_RECHECK_MS = 1000;
/** When the sink's next retry is due. `available_at > 0` names the partial index's condition, so
 * SQLite searches the few retrying rows instead of scanning the whole backlog on every wake-up. */
export const NEXT_RETRY_DUE =
  'SELECT MIN(available_at) AS t FROM deliveries WHERE sink = ? AND available_at > 0 AND available_at > ?';
/** Whether any of the sink's rows is waiting for (or due for) a retry; same partial index. */
const ANY_RETRYING = 'SELECT 1 AS y FROM deliveries WHERE sink = ? AND available_at > 0 LIMIT 1';
/** Changes per call to a sink that takes batches, and rows fetched per look at the queue. */
const BATCH = 200;
/**
 * Store mode looks for eligible rows among this many of the sink's oldest: a retrying change holds
 * back only its own subject, unless that many older rows all wait behind changes in flight or retrying.
 */
const STORE_SCAN = 5000;
/** Rows of a sink kept in memory at most (in memory mode); the rest wait in the store. */
const MIN_WINDOW = 1000;

/**
 * One sink's delivery state. The store always holds every undelivered row; memory holds a window.
 *
 * - `memory` mode (the hot path): no row of the sink is waiting for a retry. Every stored row with
 *   id ≤ `loadedUpTo` is in `queue` or in flight; rows above it are fresh and, when `spilled`, are
 *   read from the store in id order (after a restart, a window overflow, a `dlq retry`). While not
 *   spilled, the producer's rows go straight from the page commit into `queue`.
 * - `store` mode: a delivery failed (or could not be recorded). Rows are chosen by SQL, which knows
 *   each row's retry time; once no row is retrying, the sink goes back to memory mode.
 */
interface Lane {
  runtime: SinkRuntime;
  mode: 'memory' | 'store';
  queue: Row[];
  loadedUpTo: number;
  spilled: boolean;
  /** Rows in flight: id → subject. */
  inflight: Map<number, string>;
  /** Sink calls in flight (a batch is one call). */
  calls: number;
  /** store mode: rows fetched by SQL, not yet handed out. */
  buffer: Row[];
  failedSinceFetch: boolean;
}

type Head = Pick<Row, 'id' | 'subject_key' | 'available_at'>;

/**
 * Delivers the embedded queue to the sinks: one loop per sink, `concurrency` deliveries in flight.
 * Order: only the oldest undelivered row of each subject is ever eligible, so two changes of one
 * subject are never in flight together and a retrying change holds back its successors. With
 * concurrency 1 the sink gets strict queue order (a retrying change holds back everything).
 * Delivered rows are deleted in one statement per sink call.
 */
export class LocalDelivery implements DeliveryRunner {
  private stopping = false;
  private readonly loops: Promise<void>[] = [];
  private readonly wakers = new Set<() => void>();
  private readonly lanes = new Map<string, Lane>();

  private readonly bury;
  private readonly retry;
  private readonly ackRange;
  private readonly ackList;
  private readonly window: number;

  constructor(
    private readonly db: Db,
    private readonly sinks: SinkRuntime[],
    private readonly queue: QueueConfig,
    private readonly events: PipelineEvents,
    private readonly logger: Logger,
    private readonly backlog: Backlog,
  ) {
    this.bury = db.prepare(
      'INSERT OR REPLACE INTO dead_letters (sink, key, body, attempts, error, failed_at) VALUES (?, ?, ?, ?, ?, ?)',
    );
    this.retry = db.prepare(
      'UPDATE deliveries SET attempts = ?, available_at = ?, last_error = ? WHERE id = ?',
    );
    this.ackRange = db.prepare('DELETE FROM deliveries WHERE id BETWEEN ? AND ?');
    this.ackList = db.prepare('DELETE FROM deliveries WHERE id IN (SELECT value FROM json_each(?))');
    this.window = Math.max(MIN_WINDOW, 2 * BATCH * queue.concurrency);
    for (const runtime of sinks)
      this.lanes.set(runtime.name, {
        runtime,
        // The first look at the queue decides (rows may be waiting from an earlier run).
        mode: 'store',
        queue: [],
        loadedUpTo: 0,
        spilled: true,
        inflight: new Map(),
        calls: 0,
        buffer: [],
        failedSinceFetch: false,
      });
  }

  /** A page was committed: its rows join the sinks' memory queues when those are caught up. */
  queued(slices: QueuedSlices): void {
    for (const [sink, rows] of slices) {
      const lane = this.lanes.get(sink);
      if (!lane || rows.length === 0 || lane.mode !== 'memory' || lane.spilled) continue;
      if (lane.queue.length + rows.length > this.window) {
        // They stay in the store and are read back once the window has room.
        lane.spilled = true;
        continue;
      }
      for (const r of rows) lane.queue.push(r);
      lane.loadedUpTo = rows[rows.length - 1]!.id;
    }
    this.wake();
  }

  /** New rows were queued: look again now rather than at the next idle re-check. */
  wake(): void {
    for (const w of this.wakers) w();
  }

  inFlightCounts(): Map<string, number> {
    return new Map([...this.lanes].map(([sink, lane]) => [sink, lane.inflight.size]));
  }

  async start(): Promise<void> {
    for (const lane of this.lanes.values()) this.loops.push(this.loop(lane));
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

  private async loop(lane: Lane): Promise<void> {
    const sink = lane.runtime.name;
    const strict = this.queue.concurrency === 1;
    const oldest = this.db.prepare(
      'SELECT id, subject_key, available_at FROM deliveries WHERE sink = ? ORDER BY id LIMIT ?',
    );
    const byIds = this.db.prepare(
      `SELECT id, key, subject_key, body, attempts, available_at FROM deliveries
       WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id`,
    );
    const queueHead = this.db.prepare(
      'SELECT id, key, subject_key, body, attempts, available_at FROM deliveries WHERE sink = ? ORDER BY id LIMIT ?',
    );
    const above = this.db.prepare(
      'SELECT id, key, subject_key, body, attempts, available_at FROM deliveries WHERE sink = ? AND id > ? ORDER BY id LIMIT ?',
    );
    const newest = this.db.prepare('SELECT MAX(id) AS id FROM deliveries WHERE sink = ?');
    const anyRetrying = this.db.prepare(ANY_RETRYING);
    const nextDue = this.db.prepare(NEXT_RETRY_DUE);
    // A sink that takes batches gets up to BATCH changes per call, one call counting as one
    // delivery in flight; others get one change per call.
    const perCall = lane.runtime.sink.deliverBatch ? BATCH : 1;

    while (!this.stopping || lane.inflight.size > 0) {
      let wait = IDLE_RECHECK_MS;
      if (!this.stopping) {
        if (lane.mode === 'store' && !anyRetrying.get(sink)) this.toMemory(lane);
        if (lane.mode === 'memory') {
          // Rows added from outside the producer (`dlq retry`) have ids above everything loaded.
          if (!lane.spilled && ((newest.get(sink) as { id: number | null }).id ?? 0) > lane.loadedUpTo)
            lane.spilled = true;
          if (lane.spilled && lane.queue.length < this.window / 2) {
            const want = this.window - lane.queue.length;
            const rows = above.all(sink, lane.loadedUpTo, want) as Row[];
            for (const r of rows) if (!lane.inflight.has(r.id)) lane.queue.push(r);
            if (rows.length) lane.loadedUpTo = rows[rows.length - 1]!.id;
            // The producer commits on this same thread: nothing was added between the read and now.
            if (rows.length < want) lane.spilled = false;
          }
          while (lane.calls < this.queue.concurrency) {
            const rows = strict
              ? lane.inflight.size === 0
                ? this.takePrefix(lane, perCall)
                : []
              : this.takeHeads(lane, perCall);
            if (rows.length === 0) break;
            this.dispatch(lane, rows);
          }
        } else {
          if (lane.calls < this.queue.concurrency) {
            if (lane.buffer.length === 0 || lane.failedSinceFetch) {
              lane.failedSinceFetch = false;
              const now = Date.now();
              lane.buffer = strict
                ? lane.inflight.size === 0
                  ? strictPrefix(queueHead.all(sink, perCall) as Row[], now)
                  : []
                : (byIds.all(
                    JSON.stringify(
                      this.storeHeads(lane, oldest.iterate(sink, STORE_SCAN) as Iterable<Head>, now),
                    ),
                  ) as Row[]);
            }
            while (lane.buffer.length && lane.calls < this.queue.concurrency)
              this.dispatch(lane, lane.buffer.splice(0, perCall));
          }
          const due = nextDue.get(sink, Date.now()) as { t: number | null };
          if (due.t) wait = Math.min(IDLE_RECHECK_MS, Math.max(5, due.t - Date.now()));
        }
      }
      // Woken early by new rows (producer) or by a delivery finishing.
      await this.idle(this.stopping ? 50 : wait);
    }
  }

  /**
   * Store mode: the ids of the oldest row of each subject that is due and whose subject is not in
   * flight, among the sink's STORE_SCAN oldest rows (id order), up to `concurrency` calls' worth.
   * Reading only those rows' subjects needs no index on subjects, which every insert and delete on
   * the hot path would pay for.
   */
  private storeHeads(lane: Lane, oldest: Iterable<Head>, now: number): number[] {
    const limit = BATCH * this.queue.concurrency;
    const blocked = new Set(lane.inflight.values());
    const ids: number[] = [];
    for (const r of oldest) {
      if (ids.length >= limit) break;
      if (blocked.has(r.subject_key)) continue;
      blocked.add(r.subject_key);
      if (r.available_at <= now) ids.push(r.id);
    }
    return ids;
  }

  /** No row is waiting for a retry: deliver from memory again, reading the stored rows in id order. */
  private toMemory(lane: Lane): void {
    lane.mode = 'memory';
    lane.queue = [];
    lane.buffer = [];
    lane.loadedUpTo = 0;
    lane.spilled = true;
  }

  /** A failure (or an unrecorded outcome): the store decides what is eligible until retries are done. */
  private toStore(lane: Lane): void {
    lane.mode = 'store';
    lane.queue = [];
    lane.buffer = [];
    lane.failedSinceFetch = true;
  }

  /** Strict order: the head of the memory queue, up to the first repeated subject. */
  private takePrefix(lane: Lane, max: number): Row[] {
    const subjects = new Set<string>();
    let n = 0;
    while (n < lane.queue.length && n < max && !subjects.has(lane.queue[n]!.subject_key))
      subjects.add(lane.queue[n++]!.subject_key);
    return lane.queue.splice(0, n);
  }

  /** The oldest queued row of each subject not in flight, up to `max`, in id order. */
  private takeHeads(lane: Lane, max: number): Row[] {
    const blocked = new Set(lane.inflight.values());
    const taken: Row[] = [];
    const rest: Row[] = [];
    for (const r of lane.queue) {
      if (taken.length < max && !blocked.has(r.subject_key)) taken.push(r);
      else rest.push(r);
      blocked.add(r.subject_key);
    }
    if (taken.length) lane.queue = rest;
    return taken;
  }

  private dispatch(lane: Lane, rows: Row[]): void {
    for (const r of rows) lane.inflight.set(r.id, r.subject_key);
    lane.calls++;
    void this.deliver(lane, rows).then((failed) => {
      for (const r of rows) lane.inflight.delete(r.id);
      lane.calls--;
      if (failed) {
        lane.failedSinceFetch = true;
        if (lane.mode === 'memory') this.toStore(lane);
      }
      this.wake();
    });
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
  private async deliver(lane: Lane, rows: Row[]): Promise<boolean> {
    const runtime = lane.runtime;
    const started = performance.now();
    const changes = rows.map((r) => (r.change ??= parseChangeJson(r.body)));
    try {
      if (changes.length === 1 || !runtime.sink.deliverBatch) await runtime.sink.deliver(changes[0]!);
      else await runtime.sink.deliverBatch(changes);
    } catch (err) {
      this.record(runtime, rows, () => this.failed(runtime, rows, err, (performance.now() - started) / 1000));
      return true;
    }
    // If the store cannot take the acknowledgement (disk full), the rows stay queued and are
    // delivered again later: the sinks drop the duplicate by key.
    if (!this.record(runtime, rows, () => this.acknowledge(rows))) return true;
    this.backlog.add(runtime.name, -rows.length);
    reportDelivered(this.events, runtime.name, changes, (performance.now() - started) / 1000);
    return false;
  }

  /** Delete delivered rows in one statement: a range when their ids are consecutive (the usual case). */
  private acknowledge(rows: Row[]): void {
    let min = Infinity;
    let max = -Infinity;
    for (const r of rows) {
      if (r.id < min) min = r.id;
      if (r.id > max) max = r.id;
    }
    // Ids are unique, so a range exactly as wide as the batch holds nothing else.
    if (max - min + 1 === rows.length) this.ackRange.run(min, max);
    else this.ackList.run(JSON.stringify(rows.map((r) => r.id)));
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
    const decisions = rows.map((row) => decideAfterFailure(err, row.attempts, this.queue));
    this.db.transaction(() => {
      rows.forEach((row, i) => {
        const decision = decisions[i]!;
        if (decision.outcome === 'dead') {
          this.bury.run(runtime.name, row.key, row.body, decision.attempts, message, now);
          this.ackList.run(JSON.stringify([row.id]));
          dead++;
        } else this.retry.run(decision.attempts, now + decision.delayMs, message, row.id);
      });
    })();
    rows.forEach((row, i) => reportFailed(report, row.key, decisions[i]!, err, durationSeconds));
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
