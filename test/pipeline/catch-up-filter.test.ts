// A catching-up sink with a filter fetches the subjects of only the events it takes
// (src/pipeline/catch-up.ts): against the real sandbox on loopback, a sink added later with
// `start_from: earliest` and an `event_types` filter is back-filled with every matching change
// exactly once, and the catch-up's subject GETs are at most one per matching event.
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { rawConfig, readJsonl, startTestDaemon, tempDir, waitFor } from '../support/harness.js';

const BACKLOG = 150;

describe('catch-up and sink filters', () => {
  let sandbox: Sandbox | undefined;
  afterEach(async () => {
    await sandbox?.close();
    sandbox = undefined;
  });

  it('fetches no subject of an event the catching-up sink does not take', { timeout: 60_000 }, async () => {
    sandbox = await startSandbox({ seed: 29, backlog: BACKLOG });
    const dir = tempDir('feedsync-catchup-filter-');
    const all = join(dir, 'all.jsonl');
    const filtered = join(dir, 'filtered.jsonl');
    // The workflow feed embeds no subject: each is a GET, so a fetch the catch-up should not make is seen.
    const config = (sinks: Record<string, unknown>[]) =>
      rawConfig(sandbox!, dir, { services: ['workflow'], sinks });
    const events = sandbox.events('workflow');
    // The rarest type that is not a delete (deletes are never fetched): a filter that takes little.
    const counts = new Map<string, number>();
    for (const e of events)
      if (!e.event_type.endsWith('_deleted')) counts.set(e.event_type, (counts.get(e.event_type) ?? 0) + 1);
    const [type] = [...counts].sort((a, b) => a[1] - b[1] || a[0].localeCompare(b[0]))[0]!;
    const matching = events.filter((e) => e.event_type === type);
    expect(matching.length).toBeGreaterThan(0);
    expect(matching.length).toBeLessThan(events.length / 4);

    // The deployment runs with one sink and reads the whole feed.
    const first = await startTestDaemon(config([{ name: 'all', type: 'jsonl', path: all }]), dir);
    await waitFor(() => readJsonl(all).length >= events.length, 30_000, 'the first sink has every event');
    await first.daemon.stop();

    // A sink added later, back-filled from the start of the feed, taking one event type.
    sandbox.resetStats();
    const second = await startTestDaemon(
      config([
        { name: 'all', type: 'jsonl', path: all },
        {
          name: 'filtered',
          type: 'jsonl',
          path: filtered,
          start_from: 'earliest',
          filter: { event_types: [type] },
        },
      ]),
      dir,
    );
    try {
      await waitFor(
        () => readJsonl(filtered).length >= matching.length && lagging(join(dir, 'feedsync.db')) === 0,
        30_000,
        'the filtered sink caught up and rejoined',
      );
      const keys = readJsonl(filtered).map((c) => c.key);
      expect(keys.sort()).toEqual(matching.map((e) => `workflow:${e.id}`).sort());
      const subjectGets = sandbox.stats().workflow.requests.subject;
      // One GET per matching event at most; every other event of the feed is left unfetched.
      expect(subjectGets).toBeLessThanOrEqual(matching.length);
      expect(subjectGets).toBeGreaterThan(0);
    } finally {
      await second.daemon.stop();
    }
  });
});

function lagging(storePath: string): number {
  const db = new Database(storePath, { readonly: true });
  try {
    return db.prepare('SELECT COUNT(*) FROM lagging_sinks').pluck().get() as number;
  } finally {
    db.close();
  }
}
