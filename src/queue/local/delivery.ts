import type { Logger } from 'pino';
import type { QueueConfig } from '../../config/types.js';
import { changeJson, parseChangeJson } from '../../core/change-json.js';
import { errorMessage } from '../../core/errors.js';
import type { PipelineEvents } from '../../core/events.js';
import type { Db } from '../../store/store.js';
import { decideAfterFailure } from '../delivery-policy.js';
import { reportDelivered, reportFailed } from '../delivery-report.js';
import type { DeliveryRunner, SinkRuntime } from '../queue.js';
import type { Change } from '../../core/change.js';
import type { QueuedSlices } from './producer.js';
import type { LoggedPage, QueuedRow as Row } from './rows.js';
import type { StoreOwnership } from './ownership.js';
import { LEASE_LOST_MESSAGE } from '../../lease/store-lease.js';

const IDLE_RECHECK_MS = 1000;
/** A busy store write is retried this many times (backing off to 1 s: ~10 s in all) before the rows are left queued. */
const BUSY_RETRIES = 14;
/**
 * A logged page's change becoming a `deliveries` row under the id it was reserved. A key already
 * queued for the sink is skipped; an id already taken is an error (the move is refused and the
 * page stays logged), never a change silently dropped.
 */
const UNLOG_ROW =
  'INSERT INTO deliveries (id, sink, key, subject_key, body) VALUES (?, ?, ?, ?, ?) ON CONFLICT (sink, key) DO NOTHING';
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
  /** Keys of the rows in `queue` and in flight (memory mode): the producer leaves these out. */
  keys: Set<string>;
  /** Pages whose rows are stored only in `page_log` (memory mode), not yet all delivered. */
  pages: Set<LoggedPage>;
  /** Rows in flight, by id. */
  inflight: Map<number, Row>;
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
  private started: Promise<void> | undefined;
  private readonly loops: Promise<void>[] = [];
  private readonly wakers = new Set<() => void>();
  private readonly lanes = new Map<string, Lane>();

  private readonly bury;
  private readonly retry;
  private readonly ackRange;
  private readonly ackList;
  private readonly ackPage;
  private readonly unlog;
  private readonly window: number;

  constructor(
    private readonly db: Db,
    private readonly sinks: SinkRuntime[],
    private readonly queue: QueueConfig,
    private readonly events: PipelineEvents,
    private readonly logger: Logger,
    private readonly ownership: StoreOwnership,
  ) {
    this.bury = db.prepare(
      // An upsert, not a REPLACE: a REPLACE's implicit delete would fire no counting trigger.
      `INSERT INTO dead_letters (sink, key, body, attempts, error, failed_at) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (sink, key) DO UPDATE SET body = excluded.body, attempts = excluded.attempts,
         error = excluded.error, failed_at = excluded.failed_at`,
    );
    this.retry = db.prepare(
      'UPDATE deliveries SET attempts = ?, available_at = ?, last_error = ? WHERE id = ?',
    );
    this.ackRange = db.prepare('DELETE FROM deliveries WHERE id BETWEEN ? AND ?');
    this.ackList = db.prepare('DELETE FROM deliveries WHERE id IN (SELECT value FROM json_each(?))');
    this.ackPage = db.prepare('DELETE FROM page_log WHERE id = ?');
    this.unlog = db.prepare(UNLOG_ROW);
    this.window = Math.max(MIN_WINDOW, 2 * BATCH * queue.concurrency);
    for (const runtime of sinks)
      this.lanes.set(runtime.name, {
        runtime,
        // The first look at the queue decides (rows may be waiting from an earlier run).
        mode: 'store',
        queue: [],
        loadedUpTo: 0,
        spilled: true,
        keys: new Set(),
        pages: new Set(),
        inflight: new Map(),
        calls: 0,
        buffer: [],
        failedSinceFetch: false,
      });
  }

  /**
   * Asked by the producer inside a page's commit: whether this sink takes the page's changes into
   * memory now (then they are logged as one `page_log` row), leaving out keys it already holds.
   */
  takes(sink: string, changes: Change[]): Change[] | undefined {
    const lane = this.lanes.get(sink);
    if (!lane || this.stopping || lane.mode !== 'memory' || lane.spilled) return undefined;
    if (lane.queue.length + changes.length > this.window) return undefined;
    return changes.filter((c) => !lane.keys.has(c.key));
  }

  /** A page was committed: its rows join the sinks' memory queues when those are caught up. */
  queued(slices: QueuedSlices): void {
    for (const [sink, rows] of slices) {
      const lane = this.lanes.get(sink);
      if (!lane || rows.length === 0) continue;
      const page = rows[0]!.page;
      // A logged page was promised a place (takes()); rows stored one by one may have to wait.
      if (!page && (lane.mode !== 'memory' || lane.spilled)) continue;
      if (!page && lane.queue.length + rows.length > this.window) {
        // They stay in the store and are read back once the window has room.
        lane.spilled = true;
        continue;
      }
      if (page) lane.pages.add(page);
      for (const r of rows) this.enqueue(lane, r);
      lane.loadedUpTo = rows[rows.length - 1]!.id;
    }
    this.wake();
  }

  private enqueue(lane: Lane, row: Row): void {
    lane.queue.push(row);
    lane.keys.add(row.key);
  }

  /** New rows were queued: look again now rather than at the next idle re-check. */
  wake(): void {
    for (const w of this.wakers) w();
  }

  /**
   * Move the lane's logged pages' undelivered rows into `deliveries` (same ids): before a failure
   * is recorded there, when the lane leaves memory mode, and at a stop, so a restart redelivers
   * nothing already delivered. Throws when the store cannot take it (the pages stay logged).
   */
  private unlogPages(lane: Lane): void {
    if (lane.pages.size === 0) return;
    const pages = [...lane.pages];
    this.db.transaction(() => {
      for (const page of pages) {
        for (const r of page.rows)
          if (r.page === page) this.unlog.run(r.id, page.sink, r.key, r.subject_key, r.body);
        this.ackPage.run(page.id);
      }
    })();
    for (const page of pages) for (const r of page.rows) if (r.page === page) r.page = undefined;
    lane.pages.clear();
  }

  inFlightCounts(): Map<string, number> {
    return new Map([...this.lanes].map(([sink, lane]) => [sink, lane.inflight.size]));
  }

  /**
   * Returns at once; the loops start once this process owns the store (a second `run` waits as a
   * standby and reads or moves no row until then).
   */
  async start(): Promise<void> {
    this.started = this.ownership.acquire().then(async (lease) => {
      if (!lease || this.stopping) return;
      // A crash leaves pages in the log: their rows join `deliveries`, under the ids they had. An
      // ops command holding the write lock at this moment is waited out, not a reason to fail.
      for (let attempt = 0; ; attempt++) {
        try {
          unlogLeftovers(this.db);
          break;
        } catch (err) {
          if ((err as { code?: string }).code !== 'SQLITE_BUSY' || this.stopping) throw err;
          if (attempt === 0)
            this.logger.info('the store is busy (another process writes); waiting to start delivering');
          await new Promise((r) => setTimeout(r, Math.min(1000, 20 * 2 ** attempt)));
        }
      }
      if (this.stopping) return;
      for (const lane of this.lanes.values()) this.loops.push(this.loop(lane));
    });
    this.started.catch((err: unknown) =>
      this.logger.error({ err: errorMessage(err) }, 'cannot start delivering from the store'),
    );
  }

  async stop(timeoutMs: number): Promise<void> {
    this.stopping = true;
    await this.started?.catch(() => undefined);
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
    // If the store refuses, the pages stay logged: the next start moves them, redelivering all they held.
    for (const lane of this.lanes.values()) this.tryUnlog(lane);
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
    // A failing sink takes one probe at a time (sinks/probe-gate.ts): rather than hand it rows it
    // would turn away, each costing a store write and a fresh look at the queue, the lane waits.
    const gateWait = (): number => lane.runtime.readyInMs?.() ?? 0;
    let externalCheckedAt = -Infinity;

    while (!this.stopping || lane.inflight.size > 0) {
      let wait = IDLE_RECHECK_MS;
      // Not renewed in time (frozen, or the store busy): start nothing until it is, or until the
      // lease is found lost and the process stops.
      const owned = this.ownership.valid();
      if (!owned) wait = 100;
      // Left by a failure whose outcome could not be recorded: the store decides from now on, but
      // only once those pages are rows again. Until then their changes are invisible to it, and
      // later changes of the same subjects would overtake them.
      if (!this.stopping && owned && lane.mode === 'store' && lane.pages.size > 0) this.tryUnlog(lane);
      const held = lane.pages.size > 0 && lane.mode === 'store';
      if (!this.stopping && owned && !held) {
        if (lane.mode === 'store' && !anyRetrying.get(sink)) this.toMemory(lane);
        if (lane.mode === 'memory') {
          // Rows added from outside the producer (`dlq retry`) have ids above everything loaded.
          // Looked for once per idle re-check, not on every wake-up: a retried dead letter waits
          // at most that long, and the query is not paid per sink call.
          const now = performance.now();
          if (!lane.spilled && now - externalCheckedAt >= IDLE_RECHECK_MS) {
            externalCheckedAt = now;
            if (((newest.get(sink) as { id: number | null }).id ?? 0) > lane.loadedUpTo) lane.spilled = true;
          }
          if (lane.spilled && lane.queue.length < this.window / 2) {
            const want = this.window - lane.queue.length;
            const rows = above.all(sink, lane.loadedUpTo, want) as Row[];
            for (const r of rows) if (!lane.inflight.has(r.id)) this.enqueue(lane, r);
            if (rows.length) lane.loadedUpTo = rows[rows.length - 1]!.id;
            // The producer commits on this same thread: nothing was added between the read and now.
            if (rows.length < want) lane.spilled = false;
          }
          while (lane.calls < this.queue.concurrency && gateWait() === 0) {
            const rows = eligible(lane.queue, strict, inflightSubjects(lane), Date.now(), perCall);
            if (rows.length === 0) break;
            // Taken in queue order: when the last is at the rows' count, they are the queue's head.
            if (lane.queue[rows.length - 1] === rows.at(-1)) lane.queue.splice(0, rows.length);
            else {
              const taken = new Set(rows);
              lane.queue = lane.queue.filter((r) => !taken.has(r));
            }
            this.dispatch(lane, rows);
          }
        } else {
          if (lane.calls < this.queue.concurrency && gateWait() === 0) {
            if (lane.buffer.length === 0 || lane.failedSinceFetch) {
              lane.failedSinceFetch = false;
              const now = Date.now();
              const busy = inflightSubjects(lane);
              // Only the heads' subjects are read first: the store keeps no index on subjects,
              // which every insert and delete on the hot path would pay for.
              lane.buffer = strict
                ? eligible(queueHead.all(sink, perCall) as Row[], true, busy, now, perCall)
                : (byIds.all(
                    JSON.stringify(
                      eligible(
                        oldest.iterate(sink, STORE_SCAN) as Iterable<Head>,
                        false,
                        busy,
                        now,
                        BATCH * this.queue.concurrency,
                      ).map((r) => r.id),
                    ),
                  ) as Row[]);
            }
            while (lane.buffer.length && lane.calls < this.queue.concurrency && gateWait() === 0)
              this.dispatch(lane, lane.buffer.splice(0, perCall));
          }
          const due = nextDue.get(sink, Date.now()) as { t: number | null };
          if (due.t) wait = Math.min(IDLE_RECHECK_MS, Math.max(5, due.t - Date.now()));
        }
        // A probe's end wakes the lane (dispatch); this is for the next probe's time.
        const gate = gateWait();
        if (gate > 0) wait = Math.min(wait, Math.max(5, gate));
      }
      // Woken early by new rows (producer) or by a delivery finishing.
      await this.idle(this.stopping ? 50 : wait);
    }
  }

  /** No row is waiting for a retry: deliver from memory again, reading the stored rows in id order. */
  private toMemory(lane: Lane): void {
    lane.mode = 'memory';
    lane.queue = [];
    lane.keys = new Set([...lane.inflight.values()].map((r) => r.key));
    lane.buffer = [];
    lane.loadedUpTo = 0;
    lane.spilled = true;
  }

  /** A failure (or an unrecorded outcome): the store decides what is eligible until retries are done. */
  private toStore(lane: Lane): void {
    this.tryUnlog(lane);
    lane.mode = 'store';
    lane.queue = [];
    lane.keys.clear();
    lane.buffer = [];
    lane.failedSinceFetch = true;
  }

  private tryUnlog(lane: Lane): void {
    try {
      this.unlogPages(lane);
    } catch (err) {
      this.logger.error(
        { sink: lane.runtime.name, err: errorMessage(err) },
        'cannot move logged pages to the queue',
      );
    }
  }

  private dispatch(lane: Lane, rows: Row[]): void {
    for (const r of rows) lane.inflight.set(r.id, r);
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
    const context = { fence: this.ownership.fence() };
    // Checked again here, at the call: a freeze may have landed after the loop's check, while it
    // read rows. Not called, the rows stay queued (failed: the lane re-reads the store).
    if (!this.ownership.valid()) return true;
    try {
      if (changes.length === 1 || !runtime.sink.deliverBatch)
        await runtime.sink.deliver(changes[0]!, context);
      else await runtime.sink.deliverBatch(changes, context);
    } catch (err) {
      await this.record(runtime, rows, () =>
        this.failed(runtime, rows, err, (performance.now() - started) / 1000),
      );
      return true;
    }
    // Ended while this process may no longer own the store (frozen past its lease): the rows of a
    // logged page are acknowledged in memory only, so no fenced write would tell. Ask first.
    if (!this.ownership.valid() && !(await this.ownership.confirm())) {
      this.unrecorded(runtime, rows, new Error(LEASE_LOST_MESSAGE));
      return true;
    }
    // If the store cannot take the acknowledgement (disk full), the rows stay queued and are
    // delivered again later: the sinks drop the duplicate by key.
    if (!(await this.record(runtime, rows, () => this.acknowledge(lane, rows)))) return true;
    reportDelivered(this.events, runtime.name, changes, (performance.now() - started) / 1000);
    return false;
  }

  /**
   * Forget delivered rows: stored ones deleted in one statement (a range when their ids are
   * consecutive, the usual case), a logged page deleted once all its rows are delivered.
   */
  private acknowledge(lane: Lane, rows: Row[]): void {
    const stored: Row[] = [];
    const done = new Map<LoggedPage, number>();
    for (const r of rows) {
      if (r.page) done.set(r.page, (done.get(r.page) ?? 0) + 1);
      else stored.push(r);
    }
    const finished = [...done].filter(([page, n]) => page.remaining === n).map(([page]) => page);
    if (stored.length || finished.length)
      this.db.transaction(() => {
        if (stored.length) this.deleteStored(stored);
        for (const page of finished) this.ackPage.run(page.id);
      })();
    for (const [page, n] of done) page.remaining -= n;
    for (const page of finished) lane.pages.delete(page);
    for (const r of rows) {
      r.page = undefined;
      lane.keys.delete(r.key);
    }
  }

  private deleteStored(rows: Row[]): void {
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

  /**
   * Run a store write about delivered rows; a store that cannot take it is logged, never fatal.
   * Another process holding the store's write lock (an ops command, a standby's claim) is waited
   * out here, off the event loop, for a while before the rows are left queued.
   */
  private async record(runtime: SinkRuntime, rows: Row[], write: () => void): Promise<boolean> {
    for (let attempt = 0; ; attempt++) {
      try {
        write();
        return true;
      } catch (err) {
        if ((err as { code?: string }).code !== 'SQLITE_BUSY' || attempt >= BUSY_RETRIES)
          return this.unrecorded(runtime, rows, err);
        await new Promise((r) => setTimeout(r, Math.min(1000, 20 * 2 ** attempt)));
      }
    }
  }

  private unrecorded(runtime: SinkRuntime, rows: Row[], err: unknown): false {
    if (errorMessage(err).includes(LEASE_LOST_MESSAGE)) {
      // In flight when this process lost the store: the new owner delivers these again.
      this.events.emit('delivery:after-lease-loss', { sink: runtime.name, changes: rows.length });
      this.logger.warn(
        { sink: runtime.name, keys: rows.length },
        'a delivery finished after another process took the store over; it will deliver these changes again',
      );
      return false;
    }
    this.logger.error(
      { sink: runtime.name, keys: rows.length, err: errorMessage(err) },
      'cannot record a delivery outcome in the store; the changes stay queued',
    );
    return false;
  }

  private failed(runtime: SinkRuntime, rows: Row[], err: unknown, durationSeconds: number): void {
    const message = errorMessage(err);
    const now = Date.now();
    const report = { events: this.events, logger: this.logger, sink: runtime.name };
    const decisions = rows.map((row) => decideAfterFailure(err, row.attempts, this.queue));
    // The outcome is recorded on `deliveries` rows: the lane's logged pages become such rows first.
    const lane = this.lanes.get(runtime.name)!;
    this.unlogPages(lane);
    this.db.transaction(() => {
      rows.forEach((row, i) => {
        const decision = decisions[i]!;
        if (decision.outcome === 'dead') {
          this.bury.run(runtime.name, row.key, row.body, decision.attempts, message, now);
          this.ackList.run(JSON.stringify([row.id]));
        } else this.retry.run(decision.attempts, now + decision.delayMs, message, row.id);
      });
    })();
    rows.forEach((row, i) => reportFailed(report, row.key, decisions[i]!, err, durationSeconds));
  }
}

function inflightSubjects(lane: Lane): Set<string> {
  const subjects = new Set<string>();
  for (const r of lane.inflight.values()) subjects.add(r.subject_key);
  return subjects;
}

/**
 * Pages logged by a process that did not stop cleanly (kill -9, power loss): their rows go to
 * `deliveries` under their own ids. Which of them were already delivered is not known, so all are
 * delivered again (same keys; at least once after a crash).
 */
function unlogLeftovers(db: Db): void {
  const pages = db.prepare('SELECT id, sink, rows FROM page_log ORDER BY id').all() as {
    id: number;
    sink: string;
    rows: string;
  }[];
  if (pages.length === 0) return;
  const insert = db.prepare(UNLOG_ROW);
  db.transaction(() => {
    for (const page of pages) {
      (JSON.parse(page.rows) as Change[]).forEach((change, i) =>
        insert.run(page.id + i, page.sink, change.key, change.subject_url ?? change.key, changeJson(change)),
      );
    }
    db.prepare('DELETE FROM page_log').run();
  }).immediate();
}

/**
 * The one per-subject rule, for the memory queue and the store alike: from `rows` (id order), the
 * oldest row of each subject whose subject is not `busy` (in flight), when it is due, up to `max`.
 * `strict` (concurrency 1, strict queue order): nothing while anything is in flight, and only the
 * queue's head, up to the first row that is not due or repeats a subject.
 */
export function eligible<R extends Head>(
  rows: Iterable<R>,
  strict: boolean,
  busy: ReadonlySet<string>,
  now: number,
  max: number,
): R[] {
  const out: R[] = [];
  if (strict && busy.size > 0) return out;
  const blocked = new Set(busy);
  for (const r of rows) {
    if (out.length >= max) break;
    if (!blocked.has(r.subject_key) && r.available_at <= now) out.push(r);
    else if (strict) break;
    blocked.add(r.subject_key);
  }
  return out;
}
