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
