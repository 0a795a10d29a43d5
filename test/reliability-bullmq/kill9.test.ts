// Scaled-out deployment under a kill -9 loop: one `feedsync poll` and two `feedsync work` processes
// drain a backlog per service into per-worker jsonl files and one shared sqlite mirror while, round
// after round, a seeded victim (the poller or a worker) is SIGKILLed after a seeded delay and
// restarted: ROUNDS rounds during catch-up, ROUNDS more during live traffic. Every role dies at
// least once whatever the seed; failures print the seed and the kill plan so far for a replay.
// docs/guarantees.md: every key reaches the jsonl sink at least once; the mirror ends equal to the
// sandbox's live state; SIGTERM stops every process with exit 0 within shutdown_timeout_ms.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { assertValidChange } from '../support/change-schema.js';
import { tempDir } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig, type CliProcess } from '../support/process.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import {
  bullmqConfig,
  eventually,
  missingKeys,
  progressTrace,
  mirrorProblems,
  readJsonlFiles,
  sandboxKeys,
  seededRandom,
  seededShuffle,
  seedNote,
  sleep,
  stopGracefully,
  queuePrefix,
  testSeed,
  waitSourceLocks,
  waitStarted,
  watchRedisCursors,
} from './support.js';

// Catch-up sizing: the sandbox's latency, not the machine's speed, paces the poller, so that the
// catch-up rounds (at most 48 % of the backlog delivered) land while it still reads the scheduling
// feed (~90 pages of 50 at ≥ LATENCY_MS each; delivery keeps up with it). Workflow pages cost a subject GET per event, ~4 × more
// per page at 16 connections: that feed gets the smaller backlog so both finish together.
const BACKLOG = 1500;
const EXTRA_SCHEDULING = 3000;
const LATENCY_MS = 150;
const SHUTDOWN_MS = 5000;
const ROUNDS = 3;
const LIVE_RATE = 20;
// Each poller kill costs a lock TTL (15 s) before its successor polls: two bound the run time.
const MAX_POLLER_KILLS = 2;
const LOCK_WAIT_MS = 30_000;
const seed = testSeed();
const note = seedNote(seed);

type Role = 'poll' | 'work a' | 'work b';
const ROLES: readonly Role[] = ['poll', 'work a', 'work b'];

interface Kill {
  round: number;
  phase: 'catch-up' | 'live';
  victim: Role;
  /** Catch-up rounds of a worker first wait until this many backlog keys are delivered. */
  afterDelivered?: number;
  /** The catch-up round of the poller first waits until its scheduling cursor is past this. */
  afterCursor?: number;
  delayMs: number;
  /** Filled in once the victim is dead: the scheduling cursor and the keys delivered by then. */
  cursor?: number;
  delivered?: number;
  atS?: string;
}

describe(`bullmq: poll + 2 work under a kill -9 loop ${note}`, () => {
  let sandbox: Sandbox;
  let redis: RedisServer;
  const dir = tempDir('feedsync-rb-kill9-');

  beforeAll(async () => {
    redis = await startRedis();
    sandbox = await startSandbox({ seed, backlog: BACKLOG, latencyMs: LATENCY_MS });
    sandbox.generate('scheduling', EXTRA_SCHEDULING);
  });
  afterAll(async () => {
    await killAllCli();
    await sandbox?.close();
    await redis?.stop();
  });

  it(
    'delivers every key at least once and the mirror equals the live state',
    { timeout: 240_000 },
    async () => {
      const random = seededRandom(seed);
      const raw = bullmqConfig(sandbox, dir, redis.url, {
        shutdownTimeoutMs: SHUTDOWN_MS,
        sinks: [
          // One file per worker: a process killed mid-append leaves a torn line that only its own
          // next incarnation (which re-reads the tail) knows to terminate.
          { name: 'file', type: 'jsonl', path: './changes-${WORKER_ID}.jsonl' },
          { name: 'mirror', type: 'sqlite', path: './mirror.db' },
        ],
      });
      // As many subject GETs in flight as the client has connections (16), so that the latency
      // does not drag the workflow catch-up on.
      raw.sources = (raw.sources as Record<string, unknown>[]).map((s) => ({
        ...s,
        subject_concurrency: 16,
      }));
      const configPath = writeConfig(dir, raw);
      const cursors = watchRedisCursors(redis.url, queuePrefix(raw));
      const backlog = sandboxKeys(sandbox);
      let expected = backlog;
      const maxScheduling = Math.max(...sandbox.events('scheduling').map((e) => e.id));
      const minScheduling = Math.min(...sandbox.events('scheduling').map((e) => e.id));
      const start = (role: Role): CliProcess => {
        const [mode, id] = role === 'poll' ? ['poll', 'poll'] : ['work', role.slice(-1)];
        return spawnCli([mode], {
          config: configPath,
          env: { WORKER_ID: id },
          echo: process.env.RB_ECHO ? `[${role}]` : undefined,
        });
      };
      const delivered = (): number => new Set(readJsonlFiles(dir, 'changes-').map((c) => c.key)).size;

      const kills: Kill[] = [];
      const replay = (): string =>
        `replay ${note}; kills decided so far (round, victim, delay): ` +
        (kills
          .map(
            (k) =>
              `[${k.round} ${k.phase} ${k.victim}` +
              (k.afterDelivered !== undefined ? ` after ${k.afterDelivered} delivered +` : '') +
              (k.afterCursor !== undefined ? ` after cursor ${k.afterCursor} +` : '') +
              ` ${k.delayMs} ms` +
              (k.cursor !== undefined
                ? ` at +${k.atS} s, cursor ${k.cursor}/${maxScheduling}, ${k.delivered} delivered]`
                : ']'),
          )
          .join(' ') || 'none');

      const t0 = Date.now();
      const procs = {} as Record<Role, CliProcess>;
      for (const role of ROLES) procs[role] = start(role);
      const trace = progressTrace(
        () =>
          `delivered ${delivered()}/${expected.length}, cursors scheduling ${cursors.get('scheduling')}/${maxScheduling} workflow ${cursors.get('workflow')}`,
      );

      const allDelivered = (keys: readonly string[], what: string): Promise<void> =>
        eventually(
          () => missingKeys(keys, readJsonlFiles(dir, 'changes-')).length === 0,
          90_000,
          `${what} in the jsonl files`,
        ).catch((err: Error) => {
          const missing = missingKeys(keys, readJsonlFiles(dir, 'changes-'));
          throw new Error(
            `${err.message}:\n${trace.text()}\n${missing.length} missing, e.g. ${missing.slice(0, 5).join(', ')}`,
          );
        });

      // The first three victims are the poller, then the workers in a seeded order, so every role
      // dies whatever the seed and the poller while it still reads the backlog (it reads it far
      // faster than the workers deliver it: placed later, it could be done by then); later ones are
      // drawn freely, the poller only while it has kills left. Victims and delays depend on the
      // seed alone (never on timing), so a seed replays the same plan.
      const firstVictims: Role[] = [
        'poll',
        ...seededShuffle(
          ROLES.filter((r) => r !== 'poll'),
          random,
        ),
      ];
      let pollerKills = 0;
      const decide = (round: number, phase: Kill['phase']): Kill => {
        const candidates = pollerKills < MAX_POLLER_KILLS ? ROLES : ROLES.filter((r) => r !== 'poll');
        const victim = firstVictims[round - 1] ?? candidates[Math.floor(random() * candidates.length)]!;
        if (victim === 'poll') pollerKills++;
        // Catch-up moments are shares of the backlog (round i in its own band of 3–48 %) so they
        // fall inside the catch-up however long starts and restarts take; a share plainly
        // passed already means at once. Live moments are delays after the previous restart.
        const kill: Kill =
          phase === 'catch-up' && victim === 'poll'
            ? {
                round,
                phase,
                victim,
                // A fifth to a half of the scheduling backlog read.
                afterCursor: Math.floor(
                  minScheduling + (maxScheduling - minScheduling) * (0.2 + 0.3 * random()),
                ),
                delayMs: Math.floor(random() * 300),
              }
            : phase === 'catch-up'
              ? {
                  round,
                  phase,
                  victim,
                  afterDelivered: Math.floor(backlog.length * (0.03 + 0.15 * (round - 1 + random()))),
                  delayMs: Math.floor(random() * 300),
                }
              : { round, phase, victim, delayMs: 200 + Math.floor(random() * 1300) };
        kills.push(kill);
        return kill;
      };

      const killRound = async (kill: Kill): Promise<void> => {
        // A poller that does not hold its locks yet is still waiting for its predecessor's TTL.
        if (kill.victim === 'poll') await waitSourceLocks(procs.poll, LOCK_WAIT_MS);
        // After a poller kill, delivery stalls for the TTL: the next share may take ~15 s to come.
        const target = kill.afterDelivered;
        if (target !== undefined)
          await eventually(() => delivered() >= target, 60_000, `${target} keys delivered`, 100);
        const cursorTarget = kill.afterCursor;
        if (cursorTarget !== undefined)
          await eventually(
            async () => ((await cursors.read('scheduling')) ?? 0) >= cursorTarget,
            60_000,
            `the scheduling cursor past ${cursorTarget}`,
            20,
          );
        await sleep(kill.delayMs);
        const victim = procs[kill.victim];
        victim.signal('SIGKILL');
        const exit = await victim.waitForExit(5_000);
        kill.cursor = (await cursors.read('scheduling')) ?? 0;
        kill.delivered = delivered();
        kill.atS = ((Date.now() - t0) / 1000).toFixed(1);
        expect(exit.signal, `${kill.victim} had exited by itself:\n${victim.text().slice(-2000)}`).toBe(
          'SIGKILL',
        );
        procs[kill.victim] = start(kill.victim);
        await waitStarted(procs[kill.victim]);
      };

      try {
        await waitStarted(...ROLES.map((r) => procs[r]));

        let round = 1;
        for (let i = 0; i < ROUNDS; i++) await killRound(decide(round++, 'catch-up'));
        const catchUp = kills.filter((k) => k.phase === 'catch-up');
        expect(
          catchUp.filter((k) => k.delivered! >= backlog.length),
          'catch-up kills after the whole backlog was delivered',
        ).toEqual([]);
        expect(
          catchUp.some((k) => k.victim === 'poll' && k.cursor! < maxScheduling),
          `a poller kill with the scheduling cursor below ${maxScheduling}`,
        ).toBe(true);
        // The latency only kept the catch-up long enough for its kills; the rest drains at speed.
        sandbox.setLatency(0);

        // Live: traffic starts once the backlog is through (the restarted poller waited for the TTL).
        await allDelivered(backlog, 'the backlog');
        await waitSourceLocks(procs.poll, LOCK_WAIT_MS);
        sandbox.setRate(LIVE_RATE);
        const beforeLive = sandboxKeys(sandbox).length;
        for (let i = 0; i < ROUNDS; i++) await killRound(decide(round++, 'live'));
        // Stay live until the current poller holds the locks and has polled, then stop the traffic.
        await waitSourceLocks(procs.poll, LOCK_WAIT_MS);
        await sleep(1_000);
        sandbox.setRate(0);
        expected = sandboxKeys(sandbox);
        expect(expected.length, 'live events arrived during the live kills').toBeGreaterThan(beforeLive);

        await allDelivered(expected, 'every sandbox key');
        trace.stop();
        cursors.stop();

        const changes = readJsonlFiles(dir, 'changes-');
        for (const change of changes) assertValidChange(change);
        // Copies of one key are the same change (at least once, keyed).
        const byKey = new Map<string, string>();
        for (const change of changes) {
          const text = JSON.stringify(change);
          const first = byKey.get(change.key);
          if (first !== undefined) expect(text, `duplicate of ${change.key} differs`).toBe(first);
          else byKey.set(change.key, text);
        }
        expect(byKey.size).toBe(expected.length);

        // The mirror is written by two processes; it converges once every change is applied.
        await eventually(
          () => mirrorProblems(join(dir, 'mirror.db'), sandbox).length === 0,
          30_000,
          'mirror equal to the live state',
        ).catch((err: Error) => {
          throw new Error(`${err.message}:\n${mirrorProblems(join(dir, 'mirror.db'), sandbox).join('\n')}`);
        });

        const exits = await stopGracefully(
          ROLES.map((r) => procs[r]),
          SHUTDOWN_MS,
        );
        for (const exit of exits) {
          expect(exit, 'graceful stop').toMatchObject({ code: 0, signal: null });
          expect(exit.ms, `stop time of ${exit.pid}`).toBeLessThanOrEqual(SHUTDOWN_MS + 1_000);
        }
        if (process.env.RB_TRACE) console.log(`${replay()}\n${trace.text()}`);
      } catch (err) {
        trace.stop();
        cursors.stop();
        // Every failure names the seed and the kill plan so far, to replay the exact run.
        if (err instanceof Error) err.message = `${err.message}\n${replay()}`;
        throw err;
      }
    },
  );
});
