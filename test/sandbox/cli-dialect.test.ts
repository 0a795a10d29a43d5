// `feedsync sandbox --dialect NAME --dialect-option k=v --digest-algorithms A,B` as a real process:
// the switches reach the running sandbox, and bad ones stop it with an error naming them.
import { afterEach, describe, expect, it } from 'vitest';
import { killAllCli, spawnCli } from '../support/process.js';
import { rawGet, splitChallenges } from './raw-client.js';

afterEach(() => killAllCli());

describe('feedsync sandbox dialect options', () => {
  it('serves the profile with the overrides and the Digest algorithms asked for', async () => {
    const p = spawnCli([
      'sandbox',
      '--port',
      '0',
      '--backlog',
      '10',
      '--rate',
      '0',
      '--dialect',
      'rails',
      '--dialect-option',
      'xmlQuote=single',
      '--dialect-option',
      'nonceMaxUses=7',
      '--digest-algorithms',
      'SHA-256,MD5',
    ]);
    const line = await p.waitForLine((l, s) => s === 'stdout' && l.startsWith('{'), 15_000, 'ready line');
    const ready = JSON.parse(line) as { workflow_base_url: string; control_url: string };
    const dialect = (await (await fetch(`${ready.control_url}/dialect`)).json()) as Record<string, unknown>;
    expect(dialect).toMatchObject({
      nestedLists: 'array',
      xmlDeclaration: false,
      xmlQuote: 'single',
      nonceMaxUses: 7,
      digestAlgorithms: ['SHA-256', 'MD5'],
    });
    const res = await rawGet(`${ready.workflow_base_url}/api`);
    expect(res.challenges.flatMap(splitChallenges).map((c) => c.algorithm)).toEqual(['SHA-256', 'MD5']);
    expect(p.stderr().join('\n')).toContain('dialect rails, Digest SHA-256 MD5');
    expect((await p.stop()).code).toBe(0);
  });

  it.each([
    [['--dialect', 'nope'], /dialect.*unknown dialect "nope" \(one of default, strict-spec, rails/],
    [['--dialect-option', 'xmlQuotes=single'], /--dialect-option xmlQuotes.*unknown switch/],
    [['--dialect-option', 'xmlQuote=back'], /dialect\.xmlQuote.*must be one of double, single/],
    [['--digest-algorithms', 'MD5,MD4'], /dialect\.digestAlgorithms\[1\].*MD4/],
  ])('refuses %j with exit code 2 and the culprit named', async (args, message) => {
    const p = spawnCli(['sandbox', '--port', '0', '--backlog', '1', ...args]);
    const exit = await p.waitForExit(15_000);
    expect(exit.code).toBe(2);
    expect(p.stderr().join('\n')).toMatch(message);
    expect(p.stdout()).toEqual([]);
  });
});
