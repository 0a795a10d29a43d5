// The README's main-job command: `feedsync demo` runs by itself for a few seconds, prints progress,
// writes changes, and exits 0 with no Redis and no credentials.
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { readJsonl, tempDir } from '../support/harness.js';
import { killAllCli, spawnCli } from '../support/process.js';
import { assertValidChange } from '../support/change-schema.js';
import { echoPrefix } from './support.js';

describe('feedsync demo', () => {
  afterAll(() => killAllCli());

  it('--duration 4 --backlog 100 exits 0, prints progress and writes changes.jsonl', async () => {
    const dir = tempDir('feedsync-demo-');
    const p = spawnCli(['demo', '--duration', '4', '--backlog', '100', '--dir', dir], {
      echo: echoPrefix('demo'),
    });
    const exit = await p.waitForExit(20_000);
    expect(exit, p.text()).toEqual({ code: 0, signal: null });

    const out = p.stdout();
    expect(out[0]).toMatch(/^feedsync demo: sandbox at http:\/\/127\.0\.0\.1:\d+\/scheduling/);
    // One progress line per second, naming both sources and both sinks.
    const progress = out.filter((l) => /scheduling: cursor \d+/.test(l) && /workflow: cursor \d+/.test(l));
    expect(progress.length, out.join('\n')).toBeGreaterThanOrEqual(3);
    expect(progress.at(-1)).toMatch(/file: \d+ delivered/);
    expect(progress.at(-1)).toMatch(/mirror: \d+ delivered/);
    expect(out.at(-1)).toBe(`stopped; output kept in ${dir}`);

    const changes = readJsonl(join(dir, 'changes.jsonl'));
    // The 2 × 100 backlog events at least (live events at the default rate come on top).
    expect(changes.length).toBeGreaterThanOrEqual(200);
    const sources = new Set(changes.map((c) => c.source));
    expect([...sources].sort()).toEqual(['scheduling', 'workflow']);
    for (const c of changes) assertValidChange(c);
  });
});
