// What the CLI prints for a human is safe on a terminal, and what it prints of a config shows no
// credential (issue #28 item 7), through real child processes (`node dist/cli.js`) on a real store:
// a dead letter and a poll error holding upstream text with escape sequences (ESC, a C1 CSI, a
// bidi override, a line feed) come out as visible escapes, --json stays JSON that parses to the
// same text, and check-config hides a webhook's query token and a Redis URL's ?password=.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { openStore } from '../../src/store/store.js';
import { makeChange } from '../../src/testing/make-change.js';
import { tempDir } from '../support/harness.js';
import { killAllCli, runCli, writeConfig } from './support/cli.js';

const dir = tempDir('feedsync-terminal-');
afterAll(async () => {
  await killAllCli();
  rmSync(dir, { recursive: true, force: true });
});

/** Clears the screen, sets the window title, a one-character CSI (U+009B) that would turn the text red, a right-to-left override, and a forged line. */
const HOSTILE = 'job\x1b[2J\x1b]0;pwned\x07\u009b31m\u202eevil\nfeedsync: all good';
/** The raw controls a terminal acts on that `text` holds (tabs and line feeds are the output's own layout). */
function rawControls(text: string): string[] {
  return [...text].filter((ch) => {
    const c = ch.charCodeAt(0);
    return (c < 0x20 && c !== 0x09 && c !== 0x0a) || (c >= 0x7f && c <= 0x9f) || c === 0x202e;
  });
}

const WEBHOOK_TOKEN = 'tok-Qz81vw-secret';
const REDIS_PASSWORD = 'redis-Query-pw-77';

function config(): string {
  return writeConfig(
    dir,
    {
      store: { path: join(dir, 'store.db') },
      queue: { driver: 'local' },
      sources: [
        {
          name: 'workflow',
          service: 'workflow',
          base_url: 'http://127.0.0.1:9/workflow',
          username: 'ops',
          password: 'src-pw-Zq81xv',
        },
      ],
      sinks: [{ name: 'file', type: 'jsonl', path: join(dir, 'out.jsonl') }],
    },
    'local.yaml',
  );
}

/** A dead letter and a failed poll whose texts came from a hostile upstream, written to the store. */
function seedStore(): void {
  const db = openStore(join(dir, 'store.db'));
  try {
    const change = makeChange({ source: 'workflow', event_type: HOSTILE, key: 'workflow:7', event_id: 7 });
    db.prepare(
      'INSERT INTO dead_letters (sink, key, body, attempts, error, failed_at) VALUES (?, ?, ?, ?, ?, ?)',
    ).run('file', 'workflow:7', JSON.stringify(change), 3, `receiver said ${HOSTILE}`, Date.now());
    db.prepare(
      'INSERT INTO source_status (source, last_poll_at, last_ok_at, last_event_at, behind, last_error) VALUES (?, ?, ?, ?, ?, ?)',
    ).run('workflow', Date.now(), null, null, 0, `cannot decode: ${HOSTILE}`);
  } finally {
    db.close();
  }
}

describe('terminal-safe CLI output (child processes)', () => {
  const file = config();
  seedStore();

  it('dlq list writes upstream control characters as escapes; --json parses back to the same text', async () => {
    const [human, json] = await Promise.all([
      runCli(['--config', file, 'dlq', 'list']),
      runCli(['--config', file, 'dlq', 'list', '--json']),
    ]);
    expect(human.code, human.stderr).toBe(0);
    expect(rawControls(human.stdout)).toEqual([]);
    const lines = human.stdout.trim().split('\n');
    expect(lines, 'one dead letter, one line (the forged line feed escaped)').toHaveLength(1);
    expect(lines[0]).toContain('job\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\u202eevil\\nfeedsync: all good');
    expect(json.code, json.stderr).toBe(0);
    expect(rawControls(json.stdout)).toEqual([]);
    const [dead] = JSON.parse(json.stdout) as { event_type: string; error: string }[];
    expect(dead!.event_type).toBe(HOSTILE);
    expect(dead!.error).toBe(`receiver said ${HOSTILE}`);
  });

  it("status shows a source's last error escaped; --json parses back to the same text", async () => {
    const [human, json] = await Promise.all([
      runCli(['--config', file, 'status']),
      runCli(['--config', file, 'status', '--json']),
    ]);
    expect(human.code, human.stderr).toBe(0);
    expect(rawControls(human.stdout)).toEqual([]);
    expect(human.stdout).toContain('workflow: last error: cannot decode: job\\x1b[2J');
    expect(human.stdout).not.toMatch(/^feedsync: all good/m);
    expect(json.code, json.stderr).toBe(0);
    expect(rawControls(json.stdout)).toEqual([]);
    const report = JSON.parse(json.stdout) as { sources: { last_error: string }[] };
    expect(report.sources[0]!.last_error).toBe(`cannot decode: ${HOSTILE}`);
  });
});

describe('check-config hides credentials in URLs (child process)', () => {
  it("redacts a webhook's query token and a Redis URL's ?password=, keeping the rest", async () => {
    const path = writeConfig(
      dir,
      {
        store: { path: join(dir, 'cc.db') },
        queue: { driver: 'bullmq', redis_url: `redis://127.0.0.1:6399/0?password=${REDIS_PASSWORD}` },
        sources: [
          {
            name: 'workflow',
            service: 'workflow',
            base_url: 'http://127.0.0.1:9/workflow',
            username: 'ops',
            password: 'src-pw-Zq81xv',
          },
        ],
        sinks: [
          {
            name: 'hook',
            type: 'webhook',
            url: `https://bot:hookpw-91@hooks.example.test/in?token=${WEBHOOK_TOKEN}&team=ops`,
          },
        ],
      },
      'check.yaml',
    );
    const [yamlOut, jsonOut] = await Promise.all([
      runCli(['--config', path, 'check-config']),
      runCli(['--config', path, 'check-config', '--json']),
    ]);
    for (const r of [yamlOut, jsonOut]) {
      expect(r.code, r.stderr).toBe(0);
      for (const secret of [WEBHOOK_TOKEN, REDIS_PASSWORD, 'hookpw-91']) {
        expect(r.stdout).not.toContain(secret);
        expect(r.stderr).not.toContain(secret);
      }
    }
    const shown = parseYaml(yamlOut.stdout) as { sinks: { url: string }[]; queue: { redis_url: string } };
    expect(shown.sinks[0]!.url).toBe(
      'https://bot:<redacted>@hooks.example.test/in?token=<redacted>&team=ops',
    );
    expect(shown.queue.redis_url).toBe('redis://127.0.0.1:6399/0?password=<redacted>');
    const json = JSON.parse(jsonOut.stdout) as { config: typeof shown };
    expect(json.config.sinks[0]!.url).toBe(shown.sinks[0]!.url);
  });
});
