// The operator's dead-letter routine, the same for both drivers: list what the picky sink refused,
// drop one, fix the cause, retry one by key, retry the rest by sink; then check what reached it.
import { existsSync, readFileSync, unlinkSync } from 'node:fs';
import { expect } from 'vitest';
import { waitFor } from '../../support/harness.js';
import type { CliResult } from './cli.js';

export interface DeadJson {
  sink: string;
  key: string;
  event_type: string;
  attempts: number;
  failed_at: string;
  error: string;
  change: { key: string; event_type: string };
}

export function linesOf(path: string): string[] {
  return existsSync(path) ? readFileSync(path, 'utf8').split('\n').filter(Boolean) : [];
}

export async function exerciseDlq(opts: {
  cli: (...args: string[]) => Promise<CliResult>;
  /** Keys the picky sink refused (and nothing else). */
  refused: string[];
  /** Where the picky sink appends the keys it accepted. */
  pickyPath: string;
  /** Removing this file makes the picky sink accept everything. */
  flag: string;
}): Promise<void> {
  const { cli, refused, pickyPath, flag } = opts;
  expect(refused.length).toBeGreaterThan(2);
  const [list, one, otherSink] = await Promise.all([
    cli('dlq', 'list', '--json'),
    cli('dlq', 'list', '--sink', 'picky', '--key', refused[0]!),
    cli('dlq', 'list', '--sink', 'file'),
  ]);
  expect(list.code, list.stderr).toBe(0);
  const dead = JSON.parse(list.stdout) as DeadJson[];
  expect(dead.map((d) => d.key).sort()).toEqual([...refused].sort());
  for (const d of dead) {
    expect(d.sink).toBe('picky');
    expect(d.error).toContain(`refusing ${d.key} on purpose`);
    expect(d.attempts).toBe(1); // a NeverError is dead at once, not retried
    expect(d.change.key).toBe(d.key);
    expect(d.event_type).toBe(d.change.event_type);
    expect(Date.now() - Date.parse(d.failed_at)).toBeLessThan(120_000);
  }
  expect(linesOf(pickyPath).filter((k) => refused.includes(k))).toEqual([]);
  expect(one.stdout.trim().split('\n')).toHaveLength(1);
  expect(one.stdout).toContain(`picky\t${refused[0]}\t`);
  expect(otherSink.stdout.trim()).toBe('no dead letters');

  const [dropped, ...toRetry] = refused;
  const drop = await cli('dlq', 'drop', '--sink', 'picky', '--key', dropped!);
  expect(drop.stdout.trim(), drop.stderr).toBe('dropped 1 dead letter');

  unlinkSync(flag); // the operator fixed the cause
  const retryOne = await cli('dlq', 'retry', '--key', toRetry[0]!);
  expect(retryOne.stdout.trim(), retryOne.stderr).toBe('re-queued 1 dead letter');
  await waitFor(() => linesOf(pickyPath).includes(toRetry[0]!), 10_000, `${toRetry[0]} to reach the sink`);
  // Without --key, retry and drop act on every match: they insist on --all; --dry-run shows what.
  const left = toRetry.slice(1);
  const [unconfirmed, conflicting, dryRetry, dryDrop] = await Promise.all([
    cli('dlq', 'retry', '--sink', 'picky'),
    cli('dlq', 'drop', '--all', '--key', left[0]!),
    cli('dlq', 'retry', '--sink', 'picky', '--all', '--dry-run'),
    cli('dlq', 'drop', '--all', '--dry-run'),
  ]);
  expect(unconfirmed.code).toBe(2);
  expect(unconfirmed.stderr).toMatch(/without --key acts on every dead letter of sink "picky": pass --all/);
  expect(conflicting.code).toBe(2);
  expect(dryRetry.code, dryRetry.stderr).toBe(0);
  expect(dryRetry.stdout.trim().split('\n').at(-1)).toBe(
    `dry run: would re-queue ${left.length} dead letters (nothing changed)`,
  );
  const shown = dryRetry.stdout
    .split('\n')
    .filter((l) => l.startsWith('picky\t'))
    .map((l) => l.split('\t')[1]);
  expect(shown).toHaveLength(Math.min(20, left.length)); // the first 20, then "… and N more"
  for (const k of shown) expect(left).toContain(k);
  expect(dryDrop.stdout.trim().split('\n').at(-1)).toBe(
    `dry run: would drop ${left.length} dead letters (nothing changed)`,
  );
  const stillDead = JSON.parse((await cli('dlq', 'list', '--json')).stdout) as DeadJson[];
  expect(stillDead.map((d) => d.key).sort()).toEqual([...left].sort());

  const retryRest = await cli('dlq', 'retry', '--sink', 'picky', '--all');
  expect(retryRest.stdout.trim(), retryRest.stderr).toBe(`re-queued ${toRetry.length - 1} dead letters`);
  await waitFor(
    () => toRetry.every((k) => linesOf(pickyPath).includes(k)),
    10_000,
    'every retried key to reach the sink',
  );
  expect(linesOf(pickyPath)).not.toContain(dropped);
  expect((await cli('dlq', 'list')).stdout.trim()).toBe('no dead letters');
}
