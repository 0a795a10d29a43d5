// Webhook end to end with dead letters, for the bullmq driver (`poll` + `work`) and once for the
// local driver (`run`): a real receiver verifies every signature, answers 503 to some first
// attempts (retried, then delivered) and 400 to chosen keys (dead-lettered at once). The operator
// CLI then lists them (`dlq list`), drops one (`dlq drop --key`), and after the receiver is fixed
// replays the rest (`dlq retry`), which then reach the receiver; the dropped one never does.
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { rawConfig, tempDir } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig, type CliProcess } from '../support/process.js';
import { startRedis, type RedisServer } from '../support/redis.js';
import {
  bullmqConfig,
  eventually,
  sandboxKeys,
  seededRandom,
  seedNote,
  stopGracefully,
  testSeed,
  waitStarted,
} from './support.js';
import { startReceiver, type WebhookReceiver } from './webhook-receiver.js';

const BACKLOG = 60;
const SHUTDOWN_MS = 5000;
const SECRET = 'hook-secret-for-tests';
const seed = testSeed();
const note = seedNote(seed);

interface DeadLetterJson {
  sink: string;
  key: string;
  attempts: number;
  error: string;
}

/** Runs one operator command to completion; it must exit 0. */
async function cli(configPath: string, args: string[]): Promise<string[]> {
  const p = spawnCli(args, { config: configPath });
  const exit = await p.waitForExit(20_000);
  expect(exit.code, `feedsync ${args.join(' ')} exit code; output:\n${p.text()}`).toBe(0);
  return p.stdout();
}

async function listDead(configPath: string): Promise<DeadLetterJson[]> {
  const out = await cli(configPath, ['dlq', 'list', '--sink', 'hook', '--json']);
  const text = out.join('\n').trim();
  return text.startsWith('[') ? (JSON.parse(text) as DeadLetterJson[]) : [];
}

/** A stable per-key coin, so that a run replays with the same seed. */
function coin(key: string): number {
  return createHash('sha256').update(`${seed}:${key}`).digest().readUInt32BE(0) / 2 ** 32;
}

describe.each(['bullmq', 'local'] as const)(`webhook dead letters, %s driver ${note}`, (driver) => {
  let sandbox: Sandbox;
  let redis: RedisServer | undefined;
  let receiver: WebhookReceiver;
  const dir = tempDir(`feedsync-rb-hook-${driver}-`);

  beforeAll(async () => {
    if (driver === 'bullmq') redis = await startRedis();
    sandbox = await startSandbox({ seed, backlog: BACKLOG });
  });
  afterAll(async () => {
    await killAllCli();
    await receiver?.close();
    await sandbox?.close();
    await redis?.stop();
  });

  it('retries 503s, dead-letters 400s, and dlq list/drop/retry work from the CLI', async () => {
    const random = seededRandom(seed);
    const keys = sandboxKeys(sandbox);
    const bad = new Set<string>();
    while (bad.size < 3) bad.add(keys[Math.floor(random() * keys.length)]!);
    const [dropped, ...replayed] = [...bad];
    const flaky = keys.filter((k) => !bad.has(k) && coin(k) < 0.3);
    receiver = await startReceiver(SECRET, (key, attempt) => {
      if (bad.has(key)) return 400;
      return flaky.includes(key) && attempt === 1 ? 503 : 200;
    });

    const sinks = [{ name: 'hook', type: 'webhook', url: receiver.url, secret: SECRET, timeout_ms: 2000 }];
    const raw =
      driver === 'bullmq'
        ? bullmqConfig(sandbox, dir, redis!.url, { sinks, shutdownTimeoutMs: SHUTDOWN_MS })
        : { ...rawConfig(sandbox, dir, { sinks }), shutdown_timeout_ms: SHUTDOWN_MS, log: { level: 'info' } };
    const configPath = writeConfig(dir, raw);
    const procs: CliProcess[] =
      driver === 'bullmq'
        ? [spawnCli(['poll'], { config: configPath }), spawnCli(['work'], { config: configPath })]
        : [spawnCli(['run'], { config: configPath })];
    await waitStarted(...procs);

    const good = keys.filter((k) => !bad.has(k));
    await eventually(
      () => good.every((k) => receiver.accepted().has(k)) && [...bad].every((k) => receiver.attempts(k) > 0),
      30_000,
      `every good key accepted and every bad key tried ${note}`,
    );
    expect(receiver.badSignatures, note).toEqual([]);
    expect(
      receiver.requests.every((r) => r.bodyKey === r.key),
      `X-Feedsync-Key matches the body ${note}`,
    ).toBe(true);
    for (const k of flaky)
      expect(receiver.attempts(k), `503 then retried: ${k} ${note}`).toBeGreaterThanOrEqual(2);
    // 400 is final: one attempt each, then the dead-letter list.
    for (const k of bad) expect(receiver.attempts(k), `400 not retried: ${k} ${note}`).toBe(1);

    let dead: DeadLetterJson[] = [];
    await eventually(
      async () => (dead = await listDead(configPath)).length === bad.size,
      30_000,
      `${bad.size} dead letters listed ${note}`,
    );
    expect(dead.map((d) => d.key).sort(), note).toEqual([...bad].sort());
    for (const d of dead) {
      expect(d.sink).toBe('hook');
      expect(d.error, `error names the cause ${note}`).toMatch(/400/);
      expect(d.error, 'no secret in errors').not.toContain(SECRET);
    }
    // The human-readable listing shows the same keys, one line each.
    const lines = await cli(configPath, ['dlq', 'list', '--sink', 'hook']);
    for (const k of bad)
      expect(
        lines.some((l) => l.startsWith(`hook\t${k}\t`)),
        `${k} in:\n${lines.join('\n')}`,
      ).toBe(true);

    expect(await cli(configPath, ['dlq', 'drop', '--sink', 'hook', '--key', dropped!])).toEqual([
      'dropped 1 dead letter',
    ]);
    expect((await listDead(configPath)).map((d) => d.key).sort(), note).toEqual([...replayed].sort());

    // The receiver is fixed; the operator replays what is left.
    receiver.setPolicy(() => 200);
    expect(await cli(configPath, ['dlq', 'retry', '--sink', 'hook', '--all'])).toEqual([
      `re-queued ${replayed.length} dead letters`,
    ]);
    await eventually(
      () => replayed.every((k) => receiver.accepted().has(k!)),
      30_000,
      `replayed dead letters delivered ${note}`,
    );
    expect(await listDead(configPath), note).toEqual([]);
    expect(receiver.accepted().has(dropped!), `dropped ${dropped} is never delivered ${note}`).toBe(false);
    expect(receiver.attempts(dropped!), note).toBe(1);

    const exits = await stopGracefully(procs, SHUTDOWN_MS);
    for (const exit of exits) {
      expect(exit, `graceful stop ${note}`).toMatchObject({ code: 0, signal: null });
      expect(exit.ms, `stop time of ${exit.pid} ${note}`).toBeLessThanOrEqual(SHUTDOWN_MS + 1_000);
    }
  });
});
