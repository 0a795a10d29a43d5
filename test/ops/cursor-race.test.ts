// `cursor reset` racing a poller. The command used to check for a holder once, page the feed
// (minutes on a long one), then write without a fence: a `run` started meanwhile overwrote the
// reset seconds later. Now the command holds the store for its whole run: a `run` started while it
// pages waits as a standby, then starts from the cursor the command wrote.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { rawConfig, readJsonl, tempDir, waitFor } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig } from './support/cli.js';

describe('cursor reset --to latest racing a `run`', () => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    // Slow answers: paging the workflow feed to its newest event takes a few seconds.
    sandbox = await startSandbox({ seed: 23, backlog: 500, rate: 0, latencyMs: 250 });
  });
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
  });

  it(
    'the run waits for the command, then starts from the cursor it wrote; nothing overwrites it',
    { timeout: 90_000 },
    async () => {
      const dir = tempDir('feedsync-cursor-race-');
      const jsonlPath = join(dir, 'changes.jsonl');
      const raw = rawConfig(sandbox, dir, {
        source: { start_from: 'earliest', poll_interval_ms: 100 },
        sinks: [{ name: 'file', type: 'jsonl', path: jsonlPath }],
      });
      raw.log = { level: 'info' };
      const config = writeConfig(dir, raw);

      const reset = spawnCli(['--config', config, 'cursor', 'reset', 'workflow', '--to', 'latest']);
      // It is paging the feed: start the daemon now.
      await waitFor(() => reset.text().includes('page 2'), 20_000, 'the command to page the feed');
      const run = spawnCli(['--config', config, 'run']);
      await run.waitForLog(
        (l) => typeof l.msg === 'string' && l.msg.startsWith('waiting for source workflow held by '),
        20_000,
      );
      const exit = await reset.waitForExit(60_000);
      expect(exit.code, reset.text()).toBe(0);
      const newest = Math.max(...sandbox.events('workflow').map((e) => e.id));
      expect(reset.stdout().join('\n')).toMatch(new RegExp(`workflow: cursor .* → ${newest}$`, 'm'));
      expect(
        run
          .logs()
          .some((l) => typeof l.msg === 'string' && l.msg.startsWith('waiting for source workflow held by ')),
      ).toBe(true);

      // The run delivers the scheduling backlog (its cursor was not reset) but nothing of the
      // workflow feed at or below the reset cursor, and the stored cursor stays at or past it.
      const schedulingKeys = sandbox.events('scheduling').map((e) => `scheduling:${e.id}`);
      await waitFor(
        () => {
          try {
            const got = new Set(readJsonl(jsonlPath).map((c) => c.key));
            return schedulingKeys.every((k) => got.has(k));
          } catch {
            return false;
          }
        },
        60_000,
        'the scheduling backlog delivered',
      );
      const workflowDelivered = readJsonl(jsonlPath).filter((c) => c.source === 'workflow');
      expect(workflowDelivered.filter((c) => c.event_id <= newest).map((c) => c.key)).toEqual([]);
      const show = spawnCli(['--config', config, 'cursor', 'show']);
      await show.waitForExit(20_000);
      const shown = Number(/^workflow\t(\d+)$/m.exec(show.stdout().join('\n'))?.[1]);
      expect(shown).toBeGreaterThanOrEqual(newest);
      expect(await run.stop(8000)).toEqual({ code: 0, signal: null });
    },
  );
});
