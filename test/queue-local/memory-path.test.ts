// The local queue's memory path and its way back from the store: a store written by the previous
// schema drains after the upgrade, a restart redelivers what was committed, a backlog larger than
// the memory window is read back in order, and a change retrying holds back only its own subject.
import Database from 'better-sqlite3';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import type { QueueConfig } from '../../src/config/types.js';
import { changeJson } from '../../src/core/change-json.js';
import type { Change } from '../../src/core/change.js';
import { RetryLaterError } from '../../src/core/errors.js';
import { PipelineEvents } from '../../src/core/events.js';
import type { QueueDriver } from '../../src/queue/driver.js';
import { createLocalDriver } from '../../src/queue/local/index.js';
import type { Sink } from '../../src/sinks/sink.js';
import { migrations } from '../../src/store/migrations.js';
import { driverConfig, jobUrl, makeChange } from '../queue/support.js';
import { tempDir, waitFor } from '../support/harness.js';

/** Records what it is given (and the JSON text the queue handed along), fails on demand. */
class Recorder implements Sink {
  delivered: Change[] = [];
  texts: string[] = [];
  inFlight = new Set<string>();
  overlap = 0;
  constructor(private readonly fail: (c: Change) => Error | undefined = () => undefined) {}
  async deliverBatch(cs: Change[]): Promise<void> {
    for (const c of cs) {
      if (this.inFlight.has(c.subject_url!)) this.overlap++;
      this.inFlight.add(c.subject_url!);
    }
    try {
      await new Promise((r) => setTimeout(r, 1));
      for (const c of cs) {
        const err = this.fail(c);
        if (err) throw err;
      }
      for (const c of cs) {
        if (this.delivered.some((d) => d.key === c.key)) continue;
        this.delivered.push(c);
        this.texts.push(changeJson(c));
      }
    } finally {
      for (const c of cs) this.inFlight.delete(c.subject_url!);
    }
  }
  async deliver(c: Change): Promise<void> {
    await this.deliverBatch([c]);
  }
  async close() {}
}

const opened: QueueDriver[] = [];
afterEach(async () => {
  for (const d of opened.splice(0)) {
    await d.delivery?.stop(2000);
    await d.close();
  }
});

async function open(dir: string, sink: Sink, queue: Partial<QueueConfig> = {}) {
  const config = driverConfig(dir, ['s'], queue);
  const driver = await createLocalDriver({
    config,
    mode: 'run',
    events: new PipelineEvents(),
    logger: pino({ level: 'silent' }),
    sinks: [{ name: 's', sink }],
  });
  opened.push(driver);
  return { driver, storePath: config.store.path };
}

/** Per subject, the event ids in delivery order must be increasing. */
function expectSubjectOrder(delivered: Change[]): void {
  const bySubject = new Map<string, number[]>();
  for (const c of delivered)
    bySubject.set(c.subject_url!, [...(bySubject.get(c.subject_url!) ?? []), c.event_id]);
  for (const ids of bySubject.values()) expect(ids).toEqual([...ids].sort((a, b) => a - b));
}

/** Commits `changes` of source src in pages of `size`, each page's cursor its end. */
async function commitInPages(driver: QueueDriver, changes: Change[], size: number): Promise<void> {
  for (let i = 0; i < changes.length; i += size)
    await driver.producer!.commitPage({
      source: 'src',
      changes: changes.slice(i, i + size),
      cursor: i + size,
      seenAbove: [],
    });
}

describe('local queue: memory path and recovery', () => {
  it('drains a store written by the previous schema (version 2, with a retrying row) after the upgrade', async () => {
    const dir = tempDir();
    const path = join(dir, 'store.db');
    const old = new Database(path);
    for (const m of migrations.filter((m) => m.version <= 2)) old.exec(m.sql);
    old.pragma('user_version = 2');
    const insert = old.prepare(
      'INSERT INTO deliveries (sink, key, subject_key, body, attempts, available_at) VALUES (?, ?, ?, ?, ?, ?)',
    );
    const changes = Array.from({ length: 300 }, (_, i) => makeChange(i % 7));
    changes.forEach((c, i) =>
      // The first change was failing when the old version stopped: its retry is due now.
      insert.run('s', c.key, c.subject_url, JSON.stringify(c), i === 0 ? 2 : 0, i === 0 ? Date.now() : 0),
    );
    old.close();

    const sink = new Recorder();
    const { driver, storePath } = await open(dir, sink);
    await driver.delivery!.start();
    await waitFor(() => sink.delivered.length === 300, 10_000, 'the old backlog delivered');
    expect(sink.overlap).toBe(0);
    expectSubjectOrder(sink.delivered);
    expect(sink.texts).toEqual(sink.delivered.map((c) => JSON.stringify(c)));
    await waitFor(async () => (await driver.admin.counts()).s!.waiting === 0, 5000, 'rows acknowledged');
    const db = new Database(storePath, { readonly: true });
    try {
      expect(db.pragma('user_version', { simple: true })).toBe(migrations.at(-1)!.version);
      expect(
        db.prepare("SELECT name FROM sqlite_master WHERE name = 'deliveries_by_subject'").get(),
      ).toBeUndefined();
      expect((db.prepare('SELECT COUNT(*) AS n FROM deliveries').get() as { n: number }).n).toBe(0);
    } finally {
      db.close();
    }
  });

  it('redelivers after a restart everything committed but not acknowledged', async () => {
    const dir = tempDir();
    let block = true;
    const stuck = new Recorder(() => (block ? new RetryLaterError('not now', 60_000) : undefined));
    const first = await open(dir, stuck);
    await first.driver.delivery!.start();
    const changes = Array.from({ length: 120 }, (_, i) => makeChange(i % 5));
    await commitInPages(first.driver, changes, 40);
    await first.driver.delivery!.stop(500);
    await first.driver.close();
    opened.splice(opened.indexOf(first.driver), 1);
    block = false;

    const sink = new Recorder();
    const second = await open(dir, sink);
    await second.driver.delivery!.start();
    await waitFor(() => sink.delivered.length === 120, 10_000, 'all redelivered after the restart');
    expectSubjectOrder(sink.delivered);
  });

  it('reads a backlog larger than the memory window back from the store, in per-subject order', async () => {
    const dir = tempDir();
    let slow = true;
    const sink = new Recorder(() => (slow ? new RetryLaterError('warming up', 30) : undefined));
    const { driver } = await open(dir, sink, { concurrency: 2 });
    await driver.delivery!.start();
    const changes = Array.from({ length: 3000 }, (_, i) => makeChange(i % 13));
    await commitInPages(driver, changes, 50);
    slow = false;
    await waitFor(() => sink.delivered.length === 3000, 20_000, 'the whole backlog delivered');
    expect(sink.overlap).toBe(0);
    expectSubjectOrder(sink.delivered);
  });

  it('while one subject retries, the other subjects keep flowing from memory', async () => {
    const dir = tempDir();
    let failures = 5;
    const sink = new Recorder((c) =>
      c.subject_url === jobUrl(0) && failures > 0 ? (failures--, new RetryLaterError('no')) : undefined,
    );
    const { driver } = await open(dir, sink, { attempts: 20 });
    await driver.delivery!.start();
    const changes = Array.from({ length: 400 }, (_, i) => makeChange(i % 4));
    await commitInPages(driver, changes, 50);
    await waitFor(() => sink.delivered.length === 400, 10_000, 'all delivered');
    expect(failures).toBe(0);
    expect(sink.overlap).toBe(0);
    expectSubjectOrder(sink.delivered);
  });
});

/** Counts every copy it is given; a call waits while `hold` says so, and may fail. */
class Counting implements Sink {
  copies = new Map<string, number>();
  calls = 0;
  constructor(
    private readonly hold: (call: number) => Promise<void> | undefined = () => undefined,
    private readonly fail: (c: Change) => Error | undefined = () => undefined,
  ) {}
  async deliverBatch(cs: Change[]): Promise<void> {
    const call = ++this.calls;
    await this.hold(call);
    for (const c of cs) {
      const err = this.fail(c);
      if (err) throw err;
    }
    for (const c of cs) this.copies.set(c.key, (this.copies.get(c.key) ?? 0) + 1);
  }
  async deliver(c: Change): Promise<void> {
    await this.deliverBatch([c]);
  }
  async close() {}
}

function storeRows(storePath: string): { logged: number; loggedChanges: number; queued: number[] } {
  const db = new Database(storePath, { readonly: true });
  try {
    const pages = db.prepare('SELECT n FROM page_log').all() as { n: number }[];
    return {
      logged: pages.length,
      loggedChanges: pages.reduce((sum, p) => sum + p.n, 0),
      queued: (db.prepare('SELECT id FROM deliveries ORDER BY id').all() as { id: number }[]).map(
        (r) => r.id,
      ),
    };
  } finally {
    db.close();
  }
}

describe('local queue: the page log (a page taken from memory is one row)', () => {
  it('stores a page as one page_log row until its last change is delivered', async () => {
    const dir = tempDir();
    let open_!: () => void;
    const gate = new Promise<void>((r) => (open_ = r));
    const sink = new Counting(() => gate);
    const { driver, storePath } = await open(dir, sink);
    await driver.delivery!.start();
    await new Promise((r) => setTimeout(r, 50));
    await commitInPages(
      driver,
      Array.from({ length: 100 }, (_, i) => makeChange(i % 9)),
      50,
    );
    expect(storeRows(storePath)).toEqual({ logged: 2, loggedChanges: 100, queued: [] });
    expect((await driver.admin.counts()).s).toMatchObject({ waiting: expect.any(Number) });
    open_();
    await waitFor(() => sink.copies.size === 100, 10_000, 'both pages delivered');
    await waitFor(() => storeRows(storePath).logged === 0, 5000, 'the page rows deleted');
    expect([...sink.copies.values()].every((n) => n === 1)).toBe(true);
  });

  it('a failure moves the undelivered rest to deliveries; nothing delivered is delivered again', async () => {
    const dir = tempDir();
    let failures = 1;
    const failing = makeChange('flaky');
    const sink = new Counting(undefined, (c) =>
      c.key === failing.key && failures > 0 ? (failures--, new RetryLaterError('once', 20)) : undefined,
    );
    const { driver, storePath } = await open(dir, sink, { concurrency: 1 });
    await driver.delivery!.start();
    await new Promise((r) => setTimeout(r, 50));
    const changes = [
      ...Array.from({ length: 60 }, (_, i) => makeChange(i % 6)),
      failing,
      ...Array.from({ length: 139 }, (_, i) => makeChange(i % 6)),
    ];
    await commitInPages(driver, changes, 50);
    await waitFor(() => sink.copies.size === 200, 10_000, 'all delivered');
    await waitFor(() => storeRows(storePath).queued.length === 0, 5000, 'all acknowledged');
    expect(failures).toBe(0);
    expect(storeRows(storePath).logged).toBe(0);
    // Only the batch that failed was offered again; every other change reached the sink once.
    const twice = [...sink.copies].filter(([, n]) => n > 1);
    expect(twice).toEqual([]);
  });

  it('a stop moves undelivered rows of logged pages to deliveries; the next start delivers exactly those', async () => {
    const dir = tempDir();
    const never = new Promise<void>(() => undefined);
    // The first call goes through, every later one hangs until the stop gives up on it.
    const first = new Counting((call) => (call === 1 ? undefined : never));
    const one = await open(dir, first, { concurrency: 1 });
    await one.driver.delivery!.start();
    await new Promise((r) => setTimeout(r, 50));
    const changes = Array.from({ length: 150 }, (_, i) => makeChange(`s${i}`));
    await commitInPages(one.driver, changes, 50);
    await waitFor(() => first.copies.size > 0 && first.calls >= 2, 5000, 'one batch delivered, one stuck');
    await one.driver.delivery!.stop(200);
    await one.driver.close();
    opened.splice(opened.indexOf(one.driver), 1);
    const delivered = first.copies.size;
    const rows = storeRows(one.storePath);
    expect(rows.logged).toBe(0);
    expect(rows.queued).toHaveLength(150 - delivered);

    const second = new Counting();
    const two = await open(dir, second);
    await two.driver.delivery!.start();
    await waitFor(() => second.copies.size === 150 - delivered, 10_000, 'the rest delivered');
    await new Promise((r) => setTimeout(r, 100));
    for (const key of first.copies.keys()) expect(second.copies.has(key)).toBe(false);
    expect(first.copies.size + second.copies.size).toBe(150);
  });

  it('pages left logged by a killed process are delivered at the next start, under their ids', async () => {
    const dir = tempDir();
    const storePath = join(dir, 'store.db');
    const seed = await open(dir, new Counting());
    await seed.driver.close();
    opened.splice(opened.indexOf(seed.driver), 1);
    // What a kill -9 leaves: a logged page, its ids reserved, nothing in deliveries.
    const changes = Array.from({ length: 3 }, (_, i) => makeChange(`k${i}`));
    const db = new Database(storePath);
    db.prepare('INSERT INTO page_log (id, sink, n, rows) VALUES (?, ?, ?, ?)').run(
      7,
      's',
      3,
      `[${changes.map((c) => JSON.stringify(c)).join(',')}]`,
    );
    db.prepare(`INSERT INTO sqlite_sequence (name, seq) VALUES ('deliveries', 9)`).run();
    db.close();

    const hold = new Promise<void>((r) => setTimeout(r, 300));
    const sink = new Counting(() => hold);
    const { driver } = await open(dir, sink);
    // Opening touches no row: the leftovers move once this process owns the store (delivery start).
    expect(storeRows(storePath).logged).toBe(1);
    await driver.delivery!.start();
    await waitFor(() => storeRows(storePath).logged === 0, 5000, 'the leftovers moved');
    expect(storeRows(storePath)).toEqual({ logged: 0, loggedChanges: 0, queued: [7, 8, 9] });
    await waitFor(() => sink.copies.size === 3, 10_000, 'the logged page delivered');
    expect([...sink.copies.keys()]).toEqual(changes.map((c) => c.key));
  });
});

describe('local queue: logged pages beside row-by-row sinks', () => {
  it('a sink logged from memory and a sink stored row by row in the same commit never share ids', async () => {
    const dir = tempDir();
    const never = new Promise<void>(() => undefined);
    // `a` takes pages into memory (logged) and hangs; `b` fails, so it is stored row by row.
    const a = new Counting(() => never);
    const b = new Counting(undefined, () => new RetryLaterError('down', 60_000));
    const config = driverConfig(dir, ['a', 'b'], { concurrency: 1 });
    const first = await createLocalDriver({
      config,
      mode: 'run',
      events: new PipelineEvents(),
      logger: pino({ level: 'silent' }),
      sinks: [
        { name: 'a', sink: a },
        { name: 'b', sink: b },
      ],
    });
    opened.push(first);
    await first.delivery!.start();
    await new Promise((r) => setTimeout(r, 50));
    const changes = Array.from({ length: 100 }, (_, i) => makeChange(`c${i}`));
    await commitInPages(first, changes.slice(0, 50), 50);
    await waitFor(() => b.calls > 0, 5000, 'b failed once (now reading the store)');
    await commitInPages(first, changes.slice(50), 50);
    // The stop moves a's logged rows into deliveries under their reserved ids.
    await first.delivery!.stop(200);
    await first.close();
    opened.splice(opened.indexOf(first), 1);

    const db = new Database(config.store.path, { readonly: true });
    try {
      const rows = db.prepare('SELECT sink, COUNT(*) AS n FROM deliveries GROUP BY sink ORDER BY sink').all();
      expect(rows).toEqual([
        { sink: 'a', n: 100 },
        { sink: 'b', n: 100 },
      ]);
    } finally {
      db.close();
    }
  });
});

function logged(storePath: string): number {
  const db = new Database(storePath, { readonly: true });
  try {
    return (db.prepare('SELECT COUNT(*) AS n FROM page_log').get() as { n: number }).n;
  } finally {
    db.close();
  }
}

describe('local queue: a store write failing while a delivery failure is recorded', () => {
  it('holds the sink until the logged page is rows again: later changes of the subject never overtake it', async () => {
    const dir = tempDir();
    let failFirst = true;
    const [a1, b1] = [makeChange('order-s'), makeChange('order-t')];
    const sink = new Recorder((c) => {
      if (c.key === a1.key && failFirst) {
        failFirst = false;
        return new RetryLaterError('down once');
      }
      return undefined;
    });
    const { driver, storePath } = await open(dir, sink, {
      concurrency: 2,
      backoff_ms: 5,
      max_backoff_ms: 20,
    });
    await driver.delivery!.start();
    // A first page, delivered: the sink is caught up, so the next pages are logged (memory path).
    const warm = makeChange('order-warm');
    await commitInPages(driver, [warm], 1);
    await waitFor(() => sink.delivered.length === 1, 5000, 'the warm-up change');
    await new Promise((r) => setTimeout(r, 50));
    // Another connection makes the store refuse to take logged pages back (as a full disk would):
    // recording a1's failure needs exactly that.
    const other = new Database(storePath);
    other.exec(
      `CREATE TRIGGER refuse_unlog BEFORE DELETE ON page_log BEGIN SELECT RAISE(ABORT, 'injected: disk full'); END`,
    );
    await commitInPages(driver, [a1, b1], 2);
    expect(logged(storePath)).toBe(1);
    await waitFor(() => !failFirst, 5000, 'a1 refused once');
    // a1 failed and its page could not be moved: the next change of its subject arrives now.
    const a2 = makeChange('order-s');
    await commitInPages(driver, [a2], 1);
    await new Promise((r) => setTimeout(r, 500));
    expect(sink.delivered.map((c) => c.key)).not.toContain(a2.key);
    expect(logged(storePath)).toBe(1);
    other.exec('DROP TRIGGER refuse_unlog');
    other.close();
    await waitFor(
      () => sink.delivered.some((c) => c.key === a2.key),
      10_000,
      'a2 delivered once the store works',
    );
    expectSubjectOrder(sink.delivered);
    const keys = sink.delivered.map((c) => c.key);
    expect(keys.indexOf(a1.key)).toBeLessThan(keys.indexOf(a2.key));
  });
});
