// The workflow feed without newer_than (the spec is silent): the oldest 50 or the newest 50.
// `start_from: latest` must deliver exactly the events that arrive after start-up under both.
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { rawConfig, readJsonl, startTestDaemon, tempDir, waitFor } from '../support/harness.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function okPolls(port: number): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text
    .split('\n')
    .find((l) => l.startsWith('feedsync_polls_total{source="workflow",outcome="ok"} '));
  return line ? Number(line.split(' ').pop()) : 0;
}

describe('workflow feed without newer_than', () => {
  it.each(['oldest', 'newest'] as const)(
    'start_from latest delivers only events newer than start-up when the server lists its %s 50',
    async (order) => {
      const sb: Sandbox = await startSandbox({
        seed: 31,
        backlog: 160,
        dialect: { workflowUnbounded: order },
      });
      cleanups.push(() => sb.close());
      const dir = tempDir();
      const raw = rawConfig(sb, dir, { services: ['workflow'], source: { start_from: 'latest' } });
      const { daemon } = await startTestDaemon(raw, dir);
      cleanups.push(() => daemon.stop());
      await waitFor(async () => (await okPolls(daemon.metricsPort)) >= 2, 20_000, 'two polls');
      const before = new Set(sb.events('workflow').map((e) => e.id));
      sb.generate('workflow', 20);
      const fresh = sb
        .events('workflow')
        .filter((e) => !before.has(e.id))
        .map((e) => `workflow:${e.id}`);
      const file = join(dir, 'changes.jsonl');
      await waitFor(() => readJsonl(file).length >= fresh.length, 20_000, `${fresh.length} fresh changes`);
      // A little longer: a backlog event delivered late would show here.
      await new Promise((r) => setTimeout(r, 500));
      await daemon.stop();
      expect(
        readJsonl(file)
          .map((c) => c.key)
          .sort(),
      ).toEqual(fresh.sort());
    },
  );
});
