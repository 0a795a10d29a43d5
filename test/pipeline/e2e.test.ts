// The pipeline end to end, in-process, against the real sandbox over loopback: every event becomes
// exactly one schema-valid change, in both formats, with every subject state and start position.
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Change } from '../../src/core/change.js';
import type { Sandbox } from '../../src/sandbox/index.js';
import { assertValidChange } from '../support/change-schema.js';
import { rawConfig, readJsonl, startTestDaemon, tempDir, waitFor, withSandbox } from '../support/harness.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function sandbox(opts: Parameters<typeof withSandbox>[0]): Promise<Sandbox> {
  const sb = await withSandbox(opts);
  cleanups.push(() => sb.close());
  return sb;
}

/** Run a daemon until its jsonl holds `expected` changes, then stop it and return them. */
async function runUntil(
  raw: Record<string, unknown>,
  dir: string,
  expected: number,
  timeoutMs = 60_000,
): Promise<Change[]> {
  const { daemon } = await startTestDaemon(raw, dir);
  cleanups.push(() => daemon.stop());
  const file = join(dir, 'changes.jsonl');
  await waitFor(() => readJsonl(file).length >= expected, timeoutMs, `${expected} changes in ${file}`);
  await daemon.stop();
  return readJsonl(file);
}

const byKey = (changes: Change[]) => new Map(changes.map((c) => [c.key, c]));

describe('pipeline against the sandbox', () => {
  it.each(['json', 'xml'] as const)(
    'turns every event of both services into exactly one valid change (%s)',
    async (format) => {
      const sb = await sandbox({ backlog: 2500, workflowDisorder: 5 });
      const dir = tempDir();
      const total = sb.events('scheduling').length + sb.events('workflow').length;
      // A long poll interval: pages are read back to back while full, so the request counts below
      // measure the drain, not idle polling while the test waits.
      const changes = await runUntil(
        rawConfig(sb, dir, { source: { format, poll_interval_ms: 10_000 } }),
        dir,
        total,
      );

      expect(changes).toHaveLength(total);
      const keys = byKey(changes);
      expect(keys.size).toBe(total);
      for (const service of ['scheduling', 'workflow'] as const) {
        const live = sb.liveState(service);
        for (const e of sb.events(service)) {
          const c = keys.get(`${service}:${e.id}`);
          expect(c, `${service} event ${e.id}`).toBeDefined();
          assertValidChange(c);
          expect(c).toMatchObject({
            event_type: e.event_type,
            occurred_at: e.occurred_at,
            changes: e.changes,
            subject_url: e.subject_url,
            event_url: e.event_url,
            service,
          });
          if (e.operation === 'deleted') expect(c!.subject_state).toBe('deleted');
          else if (live[e.subject_url]) {
            // No live activity: what was fetched or embedded is the final state; an embedded
            // scheduling subject may lack fields a GET has (external_id), but never differs.
            expect(c!.subject_state).toBe('present');
            if (service === 'workflow') expect(c!.subject).toEqual(live[e.subject_url]);
            else
              for (const [k, v] of Object.entries(c!.subject!))
                expect(live[e.subject_url]![k], `${e.subject_url} ${k}`).toEqual(v);
          } else expect(c!.subject_state).toBe('gone');
        }
      }
      // A gone subject costs one GET at most; some are known gone without any (their delete is on the page).
      const gone = changes.filter((c) => c.subject_state === 'gone').length;
      expect(gone).toBeGreaterThan(0);
      expect(sb.stats().workflow.subject_not_found + sb.stats().scheduling.subject_not_found).toBeGreaterThan(
        0,
      );
      // Subject GETs: each distinct subject once per page at most, none for deletes or embedded ones.
      const wf = sb.stats().workflow.requests;
      const wfEvents = sb.events('workflow');
      expect(wf.subject).toBeLessThanOrEqual(wfEvents.filter((e) => e.operation !== 'deleted').length);
      expect((wf.subject + wf.feed) / wfEvents.length).toBeLessThanOrEqual(1.02);
      const sc = sb.stats().scheduling.requests;
      // Each page once: the full pages, the short last one, the page read ahead past it, and the
      // request without newer_than that reads event 0 while the cursor is still 0.
      const scEvents = sb.events('scheduling').length;
      expect(sc.feed).toBeLessThanOrEqual(Math.ceil(scEvents / 50) + 3);
    },
  );

  it('gives deep-equal changes whether the feeds are read as XML or as JSON', async () => {
    const sb = await sandbox({ backlog: 800 });
    const total = sb.events('scheduling').length + sb.events('workflow').length;
    const dirs = [tempDir(), tempDir()];
    const [asJson, asXml] = await Promise.all(
      (['json', 'xml'] as const).map((format, i) =>
        runUntil(rawConfig(sb, dirs[i]!, { source: { format } }), dirs[i]!, total),
      ),
    );
    const xml = byKey(asXml!);
    expect(asJson!.length).toBe(total);
    for (const c of asJson!) expect(xml.get(c.key), c.key).toEqual(c);
  });

  it('marks every subject skipped and fetches nothing when expand_subject is off', async () => {
    const sb = await sandbox({ backlog: 300 });
    const dir = tempDir();
    const total = sb.events('scheduling').length + sb.events('workflow').length;
    const changes = await runUntil(
      rawConfig(sb, dir, { source: { expand_subject: false, expand_source: false } }),
      dir,
      total,
    );
    expect(
      changes.every((c) => c.subject_state === 'skipped' && c.subject === null && c.source_rule === null),
    ).toBe(true);
    expect(sb.stats().scheduling.requests.subject + sb.stats().workflow.requests.subject).toBe(0);
  });

  it('embeds the rule of scheduling_created events with expand_source', async () => {
    const sb = await sandbox({ backlog: 600 });
    const dir = tempDir();
    const n = sb.events('scheduling').length;
    const changes = await runUntil(rawConfig(sb, dir, { services: ['scheduling'] }), dir, n);
    const created = changes.filter((c) => c.event_type === 'scheduling_created');
    expect(created.length).toBeGreaterThan(0);
    for (const c of created) expect(c.source_rule).toMatchObject({ resource_type: 'rule' });
    for (const c of changes.filter((x) => x.event_type !== 'scheduling_created'))
      expect(c.source_rule).toBeNull();
  });

  it('start_from latest delivers only events newer than the newest one at start-up', async () => {
    const sb = await sandbox({ backlog: 400 });
    const dir = tempDir();
    const { daemon } = await startTestDaemon(rawConfig(sb, dir, { source: { start_from: 'latest' } }), dir);
    cleanups.push(() => daemon.stop());
    await waitFor(
      async () =>
        (await fetchMetric(daemon.metricsPort, 'feedsync_polls_total{source="workflow",outcome="ok"}')) >= 2,
      20_000,
      'polls',
    );
    const before = new Set(
      [...sb.events('scheduling'), ...sb.events('workflow')].map((e) => `${e.service}:${e.id}`),
    );
    sb.generate('scheduling', 30);
    sb.generate('workflow', 30);
    const fresh = [...sb.events('scheduling'), ...sb.events('workflow')].filter(
      (e) => !before.has(`${e.service}:${e.id}`),
    );
    const file = join(dir, 'changes.jsonl');
    await waitFor(() => readJsonl(file).length >= fresh.length, 20_000, 'fresh changes');
    await daemon.stop();
    expect(
      readJsonl(file)
        .map((c) => c.key)
        .sort(),
    ).toEqual(fresh.map((e) => `${e.service}:${e.id}`).sort());
  });

  it('start_from an id delivers the events after it; an empty feed with latest starts from the beginning', async () => {
    const sb = await sandbox({ backlog: 300 });
    const dir = tempDir();
    const events = sb.events('scheduling');
    const from = events[150]!.id;
    const expected = events.filter((e) => e.id > from).length;
    const changes = await runUntil(
      rawConfig(sb, dir, { services: ['scheduling'], source: { start_from: from } }),
      dir,
      expected,
    );
    // concurrency 4: order is kept per subject, not overall
    expect(changes.map((c) => c.event_id).sort((a, b) => a - b)).toEqual(
      events.filter((e) => e.id > from).map((e) => e.id),
    );

    const empty = await sandbox({ backlog: 0 });
    const dir2 = tempDir();
    const { daemon } = await startTestDaemon(
      rawConfig(empty, dir2, { source: { start_from: 'latest' } }),
      dir2,
    );
    cleanups.push(() => daemon.stop());
    await waitFor(
      async () =>
        (await fetchMetric(daemon.metricsPort, 'feedsync_polls_total{source="scheduling",outcome="ok"}')) >=
        1,
      20_000,
      'first poll',
    );
    empty.generate('scheduling', 20);
    empty.generate('workflow', 20);
    const all = empty.events('scheduling').length + empty.events('workflow').length;
    await waitFor(
      () => readJsonl(join(dir2, 'changes.jsonl')).length >= all,
      20_000,
      'all changes of a feed that started empty',
    );
    expect(readJsonl(join(dir2, 'changes.jsonl'))).toHaveLength(all);
  });

  it('with concurrency 1 a sink receives each source in feed order', async () => {
    const sb = await sandbox({ backlog: 500 });
    const dir = tempDir();
    const n = sb.events('scheduling').length;
    const changes = await runUntil(
      rawConfig(sb, dir, { services: ['scheduling'], queue: { concurrency: 1 } }),
      dir,
      n,
    );
    expect(changes.map((c) => c.event_id)).toEqual(sb.events('scheduling').map((e) => e.id));
  });
});

async function fetchMetric(port: number, series: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.split(' ').pop()) : 0;
}
