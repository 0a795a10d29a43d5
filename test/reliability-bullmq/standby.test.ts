// Scaled mode with standby pollers (docs/scaled-mode.md): two `feedsync poll` and two `feedsync
// work` processes, the pollers keeping cursors in Redis under fenced leases (3 s TTL here).
//  1. kill -9 of the poller holding a seeded source, 3 times during catch-up and 3 times during live
//     traffic: a standby holds each of its sources within TTL + 5 s, every change reaches the sink,
//     and no page was enqueued twice (every change in exactly one slice job, as many jobs as the
//     commits counted). The failover times are printed.
//  2. A poller frozen with SIGSTOP in the middle of a page commit (past its lease check, before
//     EXEC: a Redis proxy in front of it stops it there) until a standby took its source, then
//     resumed: its commit is refused (fencing), cursors never go back, and the commit counters
//     equal those of one clean pass over the same feeds (pages × slices, exactly).
import { hostname } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { tempDir } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig, type CliProcess } from '../support/process.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import {
  bullmqConfig,
  eventually,
  missingKeys,
  progressTrace,
  queuePrefix,
  readJsonlFiles,
  sandboxKeys,
  seededRandom,
  seedNote,
  sleep,
  stopGracefully,
  testSeed,
  waitStarted,
  watchRedisCursors,
  cliStarter,
} from './support.js';
import { deliveryProblems, freezeProxy, processOf, redisOracle, SOURCES } from './standby-support.js';

const TTL_MS = 3_000;
const SHARDS = 4;
const SHUTDOWN_MS = 5_000;
const LATENCY_MS = 150;
const seed = testSeed();
const note = seedNote(seed);

const QUEUE = { lease_ttl_ms: TTL_MS, shards: SHARDS };

function configFor(sandbox: Sandbox, dir: string, redisUrl: string): Record<string, unknown> {
  const raw = bullmqConfig(sandbox, dir, redisUrl, {
    shutdownTimeoutMs: SHUTDOWN_MS,
    queue: QUEUE,
    sinks: [{ name: 'file', type: 'jsonl', path: './changes-${WORKER_ID}.jsonl' }],
  });
  raw.sources = (raw.sources as Record<string, unknown>[]).map((s) => ({ ...s, subject_concurrency: 16 }));
  return raw;
}

/** Value of `feedsync_source_leader{source}` on a process, from its own /metrics. */
async function leaderGauge(p: CliProcess, source: string): Promise<number> {
  const port = Number(p.logs().find((e) => e.msg === 'feedsync started')?.metrics_port);
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`feedsync_source_leader{source="${source}"}`));
  return Number(line?.split(' ').at(-1));
}

describe(`scaled mode: standby pollers ${note}`, () => {
  let redis: RedisServer;
  const sandboxes: Sandbox[] = [];

  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await killAllCli();
    for (const s of sandboxes) await s.close();
    await redis?.stop();
  });

  it(
    'a standby takes over within TTL + 5 s of each kill -9; nothing lost, no page enqueued twice',
    { timeout: 150_000 },
    async () => {
      const random = seededRandom(seed);
      const sandbox = await startSandbox({ seed, backlog: 1500, latencyMs: LATENCY_MS });
      sandboxes.push(sandbox);
      sandbox.generate('scheduling', 3000);
      const dir = tempDir('feedsync-rb-standby-');
      const raw = configFor(sandbox, dir, redis.url);
      const configPath = writeConfig(dir, raw);
      const oracle = redisOracle(redis.url, queuePrefix(raw));
      const cursors = watchRedisCursors(redis.url, queuePrefix(raw));
      const start = cliStarter(configPath);
      const max = Object.fromEntries(
        SOURCES.map((s) => [s, Math.max(...sandbox.events(s).map((e) => e.id))]),
      );
      const backlog = sandboxKeys(sandbox);
      const delivered = (): number => new Set(readJsonlFiles(dir, 'changes-').map((c) => c.key)).size;
      const polls: CliProcess[] = [start('poll', 'p1'), start('poll', 'p2')];
      const works = [start('work', 'a'), start('work', 'b')];
      const trace = progressTrace(
        () =>
          `delivered ${delivered()}, cursors scheduling ${cursors.get('scheduling')}/${max.scheduling} workflow ${cursors.get('workflow')}/${max.workflow}`,
      );
      const failovers: { round: number; phase: string; source: string; ms: number; cursor: number }[] = [];
      const report = (): string =>
        `${note}; failovers: ${failovers.map((f) => `[${f.round} ${f.phase} ${f.source} ${f.ms} ms at cursor ${f.cursor}]`).join(' ')}`;

      const allHeld = async (): Promise<Record<string, string | undefined>> => {
        let held: Record<string, string | undefined> = {};
        await eventually(
          async () => {
            held = await oracle.holders();
            return SOURCES.every((s) => processOf(held[s], polls));
          },
          TTL_MS + 10_000,
          'both sources leased by a live poller',
          100,
        );
        return held;
      };

      const killRound = async (round: number, phase: 'catch-up' | 'live'): Promise<void> => {
        const held = await allHeld();
        await sleep(
          phase === 'catch-up' ? 300 + Math.floor(random() * 1200) : 500 + Math.floor(random() * 1500),
        );
        const source = SOURCES[Math.floor(random() * SOURCES.length)]!;
        const victim = processOf((await oracle.holders())[source] ?? held[source], polls)!;
        const victimOwner = `${hostname()}:${victim.pid}`;
        const current = await oracle.holders();
        const victimSources = SOURCES.filter((s) => current[s] === victimOwner);
        victim.signal('SIGKILL');
        const exit = await victim.waitForExit(5_000);
        const killedAt = Date.now();
        expect(exit.signal, `poller had exited by itself ${note}:\n${victim.text().slice(-2000)}`).toBe(
          'SIGKILL',
        );
        // The killed one comes back as one more standby.
        const index = polls.indexOf(victim);
        polls[index] = start('poll', `p${index + 1}`);
        for (const s of victimSources) {
          const cursor = (await cursors.read(s)) ?? 0;
          await eventually(
            async () => {
              const h = (await oracle.holders())[s];
              return h !== undefined && h !== victimOwner;
            },
            TTL_MS + 5_000,
            `a standby to hold ${s} after the kill ${report()}`,
            50,
          );
          failovers.push({ round, phase, source: s, ms: Date.now() - killedAt, cursor });
        }
        await waitStarted(polls[index]!);
      };

      try {
        await waitStarted(...polls, ...works);
        let round = 1;
        for (let i = 0; i < 3; i++) await killRound(round++, 'catch-up');
        expect(
          failovers.some((f) => f.phase === 'catch-up' && f.cursor < max[f.source]!),
          `a kill while a cursor was still catching up ${report()}`,
        ).toBe(true);
        // The latency only kept the catch-up long enough for its kills; the rest drains at speed.
        sandbox.setLatency(0);
        await eventually(
          () => missingKeys(backlog, readJsonlFiles(dir, 'changes-')).length === 0,
          90_000,
          `the backlog delivered ${report()}\n${trace.text()}`,
        );

        sandbox.setRate(20);
        const beforeLive = sandboxKeys(sandbox).length;
        for (let i = 0; i < 3; i++) await killRound(round++, 'live');
        await allHeld();
        await sleep(1_000);
        sandbox.setRate(0);
        const expected = sandboxKeys(sandbox);
        expect(expected.length, 'live events arrived during the live kills').toBeGreaterThan(beforeLive);
        await eventually(
          () => missingKeys(expected, readJsonlFiles(dir, 'changes-')).length === 0,
          90_000,
          `every key delivered ${report()}\n${trace.text()}`,
        );
        // Caught up: both cursors at the newest event.
        await eventually(
          async () =>
            (await cursors.read('scheduling')) === Math.max(...sandbox.events('scheduling').map((e) => e.id)),
          10_000,
          'the scheduling cursor at the newest event',
        );
        trace.stop();

        for (const f of failovers)
          expect(f.ms, `failover time ${report()}`).toBeLessThanOrEqual(TTL_MS + 5_000);
        expect(failovers.length).toBeGreaterThanOrEqual(6);
        console.log(`standby failover times (TTL ${TTL_MS} ms): ${failovers.map((f) => f.ms).join(', ')} ms`);

        expect(deliveryProblems(readJsonlFiles(dir, 'changes-'), expected), report()).toEqual([]);

        // Who polls what: one leader per source in the metrics, and `status` names the holder.
        const holders = await oracle.holders();
        for (const s of SOURCES) {
          const gauges = await Promise.all(polls.map((p) => leaderGauge(p, s)));
          expect(
            gauges.filter((g) => g === 1),
            `one leader of ${s}: ${gauges.join(',')}`,
          ).toHaveLength(1);
          expect(polls[gauges.indexOf(1)]!.pid, `the leader of ${s} holds its lease`).toBe(
            processOf(holders[s], polls)?.pid,
          );
        }
        const status = spawnCli(['status', '--json'], { config: configPath, env: { WORKER_ID: 'ops' } });
        expect((await status.waitForExit(20_000)).code, status.text()).toBe(0);
        const report_ = JSON.parse(status.stdout().join('\n')) as {
          sources: { source: string; polled_by: string }[];
        };
        for (const s of report_.sources) expect(s.polled_by, s.source).toBe(holders[s.source]);

        const exits = await stopGracefully([...polls, ...works], SHUTDOWN_MS);
        for (const exit of exits)
          expect(exit, `graceful stop ${note}`).toMatchObject({ code: 0, signal: null });
      } finally {
        trace.stop();
        cursors.stop();
        await oracle.close();
      }
    },
  );

  it(
    'a poller frozen mid-commit past its lease writes nothing when resumed; commits equal one clean pass',
    { timeout: 120_000 },
    () => frozenMidCommit('read'),
  );

  it(
    'a poller frozen with its EXEC in flight, its connection cut: the transaction is not re-sent; commits equal one clean pass',
    { timeout: 120_000 },
    () => frozenMidCommit('exec'),
  );

  /**
   * `read`: the holder is frozen right after reading its lease for a commit. `exec`: frozen with its
   * MULTI…EXEC sent but held back unanswered, and the connection cut before it wakes up: ioredis
   * used to re-send that transaction on the new connection, without its WATCH, committing a page
   * under a lease the poller no longer held.
   */
  async function frozenMidCommit(at: 'read' | 'exec'): Promise<void> {
    const sandbox = await startSandbox({ seed: seed + 1, backlog: 800, latencyMs: LATENCY_MS });
    sandboxes.push(sandbox);
    sandbox.generate('scheduling', 2500);
    const dir = tempDir('feedsync-rb-sigstop-');
    const raw = configFor(sandbox, dir, redis.url);
    const configPath = writeConfig(dir, raw);
    const oracle = redisOracle(redis.url, queuePrefix(raw));
    // Each poller reaches Redis through its own proxy, which can pause it mid-commit.
    const proxies = [await freezeProxy(redis.port), await freezeProxy(redis.port)];
    const polls = proxies.map((proxy, i) =>
      cliStarter(
        writeConfig(
          dir,
          { ...raw, queue: { ...(raw.queue as object), redis_url: proxy.url } },
          `p${i + 1}.yaml`,
        ),
      )('poll', `p${i + 1}`),
    );
    const work = cliStarter(configPath)('work', 'a');
    // Sampled every 50 ms: a fenced-out holder that wrote anyway would move a cursor back.
    const history = new Map<string, number[]>(SOURCES.map((s) => [s, []]));
    const cursors = watchRedisCursors(redis.url, queuePrefix(raw), 50);
    const sampler = setInterval(() => {
      for (const s of SOURCES) {
        const c = cursors.get(s);
        if (c !== undefined) history.get(s)!.push(c);
      }
    }, 50);
    let frozen: CliProcess | undefined;
    try {
      await waitStarted(...polls, work);
      // Spread: the first poller took both sources, hands one over once it held it a TTL.
      let holders: Record<string, string | undefined> = {};
      await eventually(
        async () => {
          holders = await oracle.holders();
          const owners = SOURCES.map((s) => processOf(holders[s], polls));
          return owners.every(Boolean) && owners[0] !== owners[1];
        },
        TTL_MS * 4 + 5_000,
        `the two sources spread over the two pollers ${note}`,
        100,
      );
      const victim = processOf(holders.scheduling, polls)!;
      const standby = polls.find((p) => p !== victim)!;
      expect((await cursors.read('scheduling')) ?? 0, 'still catching up').toBeLessThan(
        Math.max(...sandbox.events('scheduling').map((e) => e.id)),
      );

      // Freeze the holder in the middle of its next commit: past the lease check, before EXEC.
      let stoppedAt = 0;
      proxies[polls.indexOf(victim)]!.arm(
        'scheduling',
        () => {
          victim.signal('SIGSTOP');
          frozen = victim;
          stoppedAt = Date.now();
        },
        at,
      );
      await eventually(
        () => proxies[polls.indexOf(victim)]!.fired,
        10_000,
        `a commit to freeze in ${note}`,
        20,
      );
      await eventually(
        async () => processOf((await oracle.holders()).scheduling, polls) === standby,
        TTL_MS + 5_000,
        `the standby to take scheduling from the frozen poller ${note}`,
        50,
      );
      const takeoverMs = Date.now() - stoppedAt;
      // Let the new holder commit pages past the frozen one's position before it wakes up.
      await sleep(Math.max(0, TTL_MS + 2_000 - takeoverMs));
      if (at === 'exec') proxies[polls.indexOf(victim)]!.cut();
      victim.signal('SIGCONT');
      frozen = undefined;
      // The commit it was in the middle of is not written: either the WATCH saw the new holder's
      // token, or — first, as the process wakes far past its TTL — its own clock says the lease
      // ran out and it stops (its commands in flight time out rather than complete). That
      // nothing was written is what the checks below prove.
      await victim.waitForLog(
        (e) =>
          e.source === 'scheduling' &&
          (/not committing the page, the lease is no longer ours/.test(String(e.err ?? e.reason)) ||
            /^lost the lease of source scheduling/.test(String(e.msg))),
        TTL_MS + 5_000,
        `the resumed poller's commit to be refused ${note}`,
      );
      console.log(`SIGSTOP takeover after ${takeoverMs} ms (TTL ${TTL_MS} ms)`);
      // The latency only kept the pollers catching up until the freeze; the rest drains at speed.
      sandbox.setLatency(0);

      await eventually(
        () => missingKeys(sandboxKeys(sandbox), readJsonlFiles(dir, 'changes-')).length === 0,
        90_000,
        `every key delivered ${note}`,
      );
      clearInterval(sampler);
      for (const [source, seen] of history) {
        const back = seen.findIndex((c, i) => i > 0 && c < seen[i - 1]!);
        expect(
          back,
          `${source} cursor went back at sample ${back}: ${seen.slice(Math.max(0, back - 3), back + 2).join(' → ')}`,
        ).toBe(-1);
      }
      const queued = await oracle.changesQueued();
      expect(deliveryProblems(readJsonlFiles(dir, 'changes-'), sandboxKeys(sandbox)), note).toEqual([]);
      const finalCursors = Object.fromEntries(
        await Promise.all(SOURCES.map(async (s) => [s, await cursors.read(s)])),
      );
      const exits = await stopGracefully([...polls, work], SHUTDOWN_MS);
      for (const exit of exits)
        expect(exit, `graceful stop ${note}`).toMatchObject({ code: 0, signal: null });

      // One clean pass over the same feeds (a fresh prefix, one poller, nothing killed) queues
      // exactly as many changes: no commit landed twice. (How many pages go into one commit depends
      // on timing, so commits and slices are not compared.)
      const cleanRaw = configFor(sandbox, dir, redis.url);
      const cleanOracle = redisOracle(redis.url, queuePrefix(cleanRaw));
      const cleanCursors = watchRedisCursors(redis.url, queuePrefix(cleanRaw));
      const cleanPoll = spawnCli(['poll'], {
        config: writeConfig(dir, cleanRaw, 'clean.yaml'),
        env: { WORKER_ID: 'clean' },
      });
      try {
        await eventually(
          async () => {
            for (const s of SOURCES) if ((await cleanCursors.read(s)) !== finalCursors[s]) return false;
            return true;
          },
          60_000,
          `the clean pass to reach cursors ${JSON.stringify(finalCursors)}`,
        );
        await sleep(500);
        expect(
          await cleanOracle.changesQueued(),
          `changes queued by the clean pass vs the frozen run ${note}`,
        ).toBe(queued);
      } finally {
        await cleanPoll.stop(SHUTDOWN_MS);
        cleanCursors.stop();
        await cleanOracle.close();
      }
    } finally {
      if (frozen) frozen.signal('SIGCONT');
      clearInterval(sampler);
      cursors.stop();
      await oracle.close();
      for (const proxy of proxies) await proxy.close();
    }
  }
});
