// Sinks that never hold each other back (docs/sink-positions.md), with real processes for both
// drivers (`run`; `poll` + `work`): a webhook whose receiver is down (503, Retry-After: 1) beside a
// jsonl file, `max_backlog: 300`, ~3,200 events over both services plus live ones.
//  - the file gets everything in about a healthy run's time while the webhook is parked;
//  - the down receiver gets at most ~2 requests per second per delivering process;
//  - once it answers again, the webhook drains, catches up from the feed and rejoins: every change
//    exactly once, per-subject order kept (no crash in this test);
//  - kill -9 of the poller again and again during the catch-up and the hand-over: nothing lost,
//    order kept (copies are what a kill may cost);
//  - a sink added later with start_from: earliest is back-filled while the file stays live, and
//    `feedsync replay` re-delivers one sink from a point without touching the other.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { rawConfig, readJsonl, tempDir } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig, type CliProcess } from '../support/process.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import {
  bullmqConfig,
  eventually,
  sandboxKeys,
  seededRandom,
  seedNote,
  testSeed,
  waitStarted,
} from '../reliability-bullmq/support.js';
import { startReceiver, type WebhookReceiver } from '../reliability-bullmq/webhook-receiver.js';

const SECRET = 'isolation-secret';
const BACKLOG = 1600;
const seed = testSeed();
const note = seedNote(seed);

type Driver = 'local' | 'bullmq';

describe.each(['local', 'bullmq'] as const)(`sink isolation, %s driver ${note}`, (driver: Driver) => {
  let redis: RedisServer | undefined;
  let sandbox: Sandbox | undefined;
  let receiver: WebhookReceiver | undefined;

  beforeAll(async () => {
    if (driver === 'bullmq') redis = await startRedis();
  });
  afterEach(async () => {
    await killAllCli();
    await receiver?.close();
    receiver = undefined;
    await sandbox?.close();
    sandbox = undefined;
  });
  afterAll(async () => {
    await redis?.stop();
  });

  function config(dir: string, sinks: Record<string, unknown>[], queue: Record<string, unknown> = {}) {
    const base =
      driver === 'bullmq'
        ? bullmqConfig(sandbox!, dir, redis!.url, { sinks, queue: { max_backlog: 300, ...queue } })
        : {
            ...rawConfig(sandbox!, dir, { sinks, queue: { max_backlog: 300, ...queue } }),
            log: { level: 'info' },
          };
    return writeConfig(dir, base);
  }

  /** The processes that poll and deliver; the poller first. */
  function start(configPath: string): CliProcess[] {
    return driver === 'bullmq'
      ? [spawnCli(['poll'], { config: configPath }), spawnCli(['work'], { config: configPath })]
      : [spawnCli(['run'], { config: configPath })];
  }

  /** Per subject, the ids of a sink's changes must be in feed order (scheduling: id order). */
  function orderBreaks(keys: string[]): string[] {
    const subjectOf = new Map(
      sandbox!.events('scheduling').map((e) => [`scheduling:${e.id}`, e.subject_url]),
    );
    const last = new Map<string, number>();
    const breaks: string[] = [];
    for (const key of keys) {
      const subject = subjectOf.get(key);
      if (subject === undefined) continue;
      const id = Number(key.slice(key.indexOf(':') + 1));
      if ((last.get(subject) ?? -1) > id) breaks.push(`${key} after ${subject}@${last.get(subject)}`);
      last.set(subject, Math.max(id, last.get(subject) ?? -1));
    }
    return breaks;
  }

  /** Keys the receiver accepted, in the order of their first acceptance. */
  const acceptedInOrder = (r: WebhookReceiver): string[] => {
    const seen = new Set<string>();
    return r.requests.filter((q) => q.status < 300 && !seen.has(q.key) && seen.add(q.key)).map((q) => q.key);
  };

  it('a down webhook costs the file sink nothing; after recovery it catches up: every change once, in order', async () => {
    const dir = tempDir(`feedsync-iso-${driver}-`);
    sandbox = await startSandbox({ seed, backlog: BACKLOG });
    let up = false;
    receiver = await startReceiver(SECRET, () => (up ? 200 : 503), { retryAfter: '1' });
    const configPath = config(dir, [
      { name: 'file', type: 'jsonl', path: `${dir}/file.jsonl` },
      { name: 'hook', type: 'webhook', url: receiver.url, secret: SECRET, timeout_ms: 2000 },
    ]);
    const procs = start(configPath);
    await waitStarted(...procs);
    sandbox.setRate(5);
    const t0 = Date.now();
    const backlogKeys = sandboxKeys(sandbox);
    await eventually(
      () => {
        const got = new Set(readJsonl(`${dir}/file.jsonl`).map((c) => c.key));
        return backlogKeys.every((k) => got.has(k));
      },
      60_000,
      `the file sink receiving the whole backlog while the webhook is down ${note}`,
    );
    const fileMs = Date.now() - t0;
    expect(fileMs, `file sink drained in ${fileMs} ms ${note}`).toBeLessThan(45_000);
    await procs[0]!.waitForLog((e) => /parked/.test(String(e.msg)), 20_000, 'the hook parked');
    // Probed, not flooded: the requests of a 5 s window well after the first failures.
    const from = Date.now();
    await new Promise((r) => setTimeout(r, 5_000));
    const inWindow = receiver.requests.filter((q) => q.at >= from && q.at < from + 5_000).length;
    expect(inWindow / 5, `requests per second to the down receiver ${note}`).toBeLessThanOrEqual(2.5);
    console.log(
      `${driver}: file sink complete in ${fileMs} ms with the webhook down; ${inWindow / 5} requests/s to the down receiver`,
    );

    up = true;
    const recovered = Date.now();
    sandbox.setRate(0);
    const all = sandboxKeys(sandbox);
    await eventually(
      () => all.every((k) => receiver!.accepted().has(k)),
      90_000,
      `the webhook receiving every change after recovery ${note}`,
    );
    console.log(`${driver}: webhook complete ${Date.now() - recovered} ms after its receiver came back`);
    await new Promise((r) => setTimeout(r, 1_000));
    const accepted = receiver.requests.filter((q) => q.status < 300).map((q) => q.key);
    const copies = accepted.length - new Set(accepted).size;
    expect(copies, `changes the webhook accepted twice ${note}`).toBe(0);
    expect(orderBreaks(acceptedInOrder(receiver)), `per-subject order at the webhook ${note}`).toEqual([]);
    const fileKeys = readJsonl(`${dir}/file.jsonl`).map((c) => c.key);
    expect(new Set(fileKeys).size).toBe(all.length);
    expect(procs[0]!.logs().some((e) => /rejoined its shared stream/.test(String(e.msg)))).toBe(true);
  }, 240_000);

  it('kill -9 of the poller during the catch-up and the hand-over loses nothing and keeps order', async () => {
    const dir = tempDir(`feedsync-iso-kill-${driver}-`);
    sandbox = await startSandbox({ seed: seed + 1, backlog: BACKLOG });
    let up = false;
    receiver = await startReceiver(SECRET, () => (up ? 200 : 503), { retryAfter: '1' });
    const configPath = config(dir, [
      { name: 'file', type: 'jsonl', path: `${dir}/file.jsonl` },
      { name: 'hook', type: 'webhook', url: receiver.url, secret: SECRET, timeout_ms: 2000 },
    ]);
    let procs = start(configPath);
    await waitStarted(...procs);
    await procs[0]!.waitForLog((e) => /parked/.test(String(e.msg)), 60_000, 'the hook parked');
    up = true;
    sandbox.setRate(5);
    const random = seededRandom(seed);
    // Kill the poller (and, locally, the one process) at seeded moments while the webhook catches up.
    let kills = 0;
    while (kills < 4 && receiver.accepted().size < sandboxKeys(sandbox).length) {
      await new Promise((r) => setTimeout(r, 500 + random() * 1500));
      procs[0]!.signal('SIGKILL');
      await procs[0]!.waitForExit(10_000);
      kills++;
      const [poller] = driver === 'bullmq' ? [spawnCli(['poll'], { config: configPath })] : start(configPath);
      procs = [poller!, ...procs.slice(1)];
      await waitStarted(poller!);
    }
    sandbox.setRate(0);
    const all = sandboxKeys(sandbox);
    await eventually(
      () => all.every((k) => receiver!.accepted().has(k)),
      120_000,
      `the webhook receiving every change despite ${kills} kills ${note}`,
    );
    expect(orderBreaks(acceptedInOrder(receiver)), `per-subject order at the webhook ${note}`).toEqual([]);
    await eventually(
      () => {
        const fileKeys = new Set(readJsonl(`${dir}/file.jsonl`).map((c) => c.key));
        return all.every((k) => fileKeys.has(k));
      },
      30_000,
      `the file complete ${note}`,
    );
  }, 300_000);

  it('a sink added later with start_from: earliest is back-filled; replay re-delivers one sink only', async () => {
    const dir = tempDir(`feedsync-iso-backfill-${driver}-`);
    sandbox = await startSandbox({ seed: seed + 2, backlog: 400 });
    receiver = await startReceiver(SECRET, () => 200);
    const file = { name: 'file', type: 'jsonl', path: `${dir}/file.jsonl` };
    let configPath = config(dir, [file]);
    let procs = start(configPath);
    await waitStarted(...procs);
    const first = sandboxKeys(sandbox);
    await eventually(
      () => new Set(readJsonl(`${dir}/file.jsonl`).map((c) => c.key)).size === first.length,
      60_000,
      'the file sink complete',
    );
    for (const p of procs) p.signal('SIGTERM');
    await Promise.all(procs.map((p) => p.waitForExit(15_000)));

    // The same deployment with a second sink that starts from the beginning of the feed.
    const late = { name: 'late', type: 'webhook', url: receiver.url, secret: SECRET, start_from: 'earliest' };
    configPath = config(dir, [file, late]);
    procs = start(configPath);
    await waitStarted(...procs);
    sandbox.setRate(5);
    await eventually(
      () => first.every((k) => receiver!.accepted().has(k)),
      60_000,
      `the late sink back-filled ${note}`,
    );
    sandbox.setRate(0);
    const all = sandboxKeys(sandbox);
    await eventually(
      () => all.every((k) => receiver!.accepted().has(k)),
      30_000,
      'the late sink joined the live stream',
    );
    await new Promise((r) => setTimeout(r, 1_000));
    const accepted = receiver.requests.filter((q) => q.status < 300).map((q) => q.key);
    expect(accepted.length - new Set(accepted).size, `copies at the back-filled sink ${note}`).toBe(0);
    expect(
      orderBreaks(acceptedInOrder(receiver)),
      `per-subject order at the back-filled sink ${note}`,
    ).toEqual([]);
    const fileBefore = readJsonl(`${dir}/file.jsonl`).length;
    expect(fileBefore, 'the file got each change once').toBe(all.length);

    // Replay: the late sink again from the start of scheduling; the file untouched.
    const replay = spawnCli(['replay', '--sink', 'late', '--source', 'scheduling', '--from', 'earliest'], {
      config: configPath,
    });
    expect((await replay.waitForExit(20_000)).code, replay.text()).toBe(0);
    expect(replay.text()).toMatch(/late from scheduling: replaying after event 0/);
    const again = spawnCli(['replay', '--sink', 'late', '--source', 'scheduling', '--from', 'earliest'], {
      config: configPath,
    });
    // Refused while the first one runs (unless that one already caught up: then it is a new replay).
    if ((await again.waitForExit(20_000)).code !== 0) expect(again.text()).toMatch(/replay is still running/);
    const unknown = spawnCli(['replay', '--sink', 'nope', '--from', 'earliest'], { config: configPath });
    expect((await unknown.waitForExit(20_000)).code).not.toBe(0);
    expect(unknown.text()).toMatch(/unknown sink "nope"/);
    const scheduling = all.filter((k) => k.startsWith('scheduling:'));
    await eventually(
      () =>
        scheduling.every((k) => receiver!.requests.filter((q) => q.key === k && q.status < 300).length >= 2),
      60_000,
      `every scheduling change re-delivered to the late sink ${note}`,
    );
    expect(readJsonl(`${dir}/file.jsonl`).length, 'the file untouched by the replay').toBe(fileBefore);
  }, 240_000);
});
