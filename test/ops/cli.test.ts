// The CLI surface as an operator meets it, through real child processes: check-config's output and
// exit codes, --version, and usage errors.
import { readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { tempDir } from '../support/harness.js';
import { killAllCli, runCli, writeConfig } from './support/cli.js';

const dir = tempDir('feedsync-ops-cli-');
afterAll(async () => {
  await killAllCli();
  rmSync(dir, { recursive: true, force: true });
});

const SOURCE_PASSWORD = 'src-pw-Zq81xv';
const WEBHOOK_SECRET = 'hook-secret-Kp27wd';
const REDIS_PASSWORD = 'redis-pw-Vm55te';

function validConfig(): Record<string, unknown> {
  return {
    store: { path: join(dir, 'store.db') },
    queue: { driver: 'bullmq', redis_url: `redis://:${REDIS_PASSWORD}@127.0.0.1:6399/0` },
    sources: [
      {
        name: 'scheduling',
        service: 'scheduling',
        base_url: 'http://127.0.0.1:4010/scheduling',
        username: 'ops',
        password: '${OPS_TEST_PASSWORD}',
      },
    ],
    sinks: [
      { name: 'file', type: 'jsonl', path: join(dir, 'out.jsonl') },
      { name: 'hook', type: 'webhook', url: 'http://127.0.0.1:9/hook', secret: WEBHOOK_SECRET },
    ],
  };
}

describe.concurrent('check-config (child process)', () => {
  it('exits 0 and prints the effective config with every secret redacted', async () => {
    const file = writeConfig(dir, validConfig(), 'valid.yaml');
    const r = await runCli(['--config', file, 'check-config'], {
      env: { OPS_TEST_PASSWORD: SOURCE_PASSWORD },
    });
    expect(r.code, r.stderr).toBe(0);
    for (const secret of [SOURCE_PASSWORD, WEBHOOK_SECRET, REDIS_PASSWORD]) {
      expect(r.stdout).not.toContain(secret);
      expect(r.stderr).not.toContain(secret);
    }
    const effective = parseYaml(r.stdout) as {
      sources: { password: string; poll_interval_ms: number }[];
      sinks: { secret?: string }[];
      queue: { redis_url: string };
    };
    expect(effective.sources[0]!.password).toBe('<redacted>');
    expect(effective.sources[0]!.poll_interval_ms).toBe(5000); // defaults are filled in
    expect(effective.sinks[1]!.secret).toBe('<redacted>');
    expect(effective.queue.redis_url).toBe('redis://:<redacted>@127.0.0.1:6399/0');
  });

  it('reads $FEEDSYNC_CONFIG when --config is not given', async () => {
    const file = writeConfig(dir, validConfig(), 'from-env.yaml');
    const r = await runCli(['check-config'], {
      env: { FEEDSYNC_CONFIG: file, OPS_TEST_PASSWORD: SOURCE_PASSWORD },
    });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`from ${file}`);
  });

  const bad: [string, (c: Record<string, unknown>) => void, Record<string, string>, RegExp][] = [
    [
      'an unknown key',
      (c) => ((c.sources as Record<string, unknown>[])[0]!.pol_interval_ms = 5),
      { OPS_TEST_PASSWORD: SOURCE_PASSWORD },
      /sources\[0\]\.pol_interval_ms/,
    ],
    ['an unset ${ENV}', () => undefined, {}, /OPS_TEST_PASSWORD/],
    [
      'a bad URL',
      (c) => ((c.sources as Record<string, unknown>[])[0]!.base_url = 'ftp//nowhere'),
      { OPS_TEST_PASSWORD: SOURCE_PASSWORD },
      /sources\[0\]\.base_url/,
    ],
    [
      'Digest over plain http off loopback',
      (c) => ((c.sources as Record<string, unknown>[])[0]!.base_url = 'http://scheduling.example.com/s'),
      { OPS_TEST_PASSWORD: SOURCE_PASSWORD },
      /sources\[0\]\.base_url: http:\/\/scheduling\.example\.com is plain http off loopback.*sources\[0\]\.allow_insecure_http: true/,
    ],
  ];
  for (const [what, mutate, env, keyPath] of bad) {
    it(`exits 2 naming the key path for ${what}, without echoing secrets`, async () => {
      const config = validConfig();
      mutate(config);
      const file = writeConfig(dir, config, `bad-${what.replace(/\W+/g, '-')}.yaml`);
      const r = await runCli(['--config', file, 'check-config'], { env });
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(keyPath);
      expect(r.stdout).toBe('');
      for (const secret of [SOURCE_PASSWORD, WEBHOOK_SECRET, REDIS_PASSWORD])
        expect(r.stderr).not.toContain(secret);
    });
  }

  it('exits 2 for a missing config file, naming it', async () => {
    const missing = join(dir, 'nope.yaml');
    const r = await runCli(['--config', missing, 'check-config']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(missing);
  });

  it('other commands also exit 2 on an invalid config, naming the key', async () => {
    const config = validConfig();
    (config.queue as Record<string, unknown>).attempts = 0;
    const file = writeConfig(dir, config, 'bad-attempts.yaml');
    const r = await runCli(['--config', file, 'status'], { env: { OPS_TEST_PASSWORD: SOURCE_PASSWORD } });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/queue\.attempts/);
  });
});

describe.concurrent('usage', () => {
  it('--version prints the package version and exits 0', async () => {
    const pkg = JSON.parse(readFileSync(resolve('package.json'), 'utf8')) as { version: string };
    const r = await runCli(['--version']);
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toBe(pkg.version);
  });

  it.each([
    [['bogus-command']],
    [['status', '--bogus-flag']],
    [['cursor', 'reset', 'scheduling', '--to', 'sideways']],
    [['dlq', 'list', '--limit', '0']],
  ])('%j is a usage error: exit 2 with a message on stderr', async (args) => {
    const r = await runCli(args);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/error:/);
  });
});
