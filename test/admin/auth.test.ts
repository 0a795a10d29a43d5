// Who may do what on the admin API: bearer tokens from files (write, read-only), 401 without a
// valid one, 403 for the read token on a change; every change audited (the token's label, never
// the token) and counted. Also the transport's refusals: bodies over 64 KiB, bad JSON, unknown
// paths and methods. Auth does not depend on the driver: the local one serves here.
import { writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readAdminTokens } from '../../src/admin/tokens.js';
import { validateConfig } from '../../src/config/load.js';
import { ConfigError } from '../../src/core/errors.js';
import { tempDir } from '../support/harness.js';
import { adminConfig, call, openAdminFixture, type AdminFixture } from './support.js';

let f: AdminFixture;
beforeAll(async () => {
  f = await openAdminFixture({ queue: () => ({ driver: 'local' }) });
}, 60_000);
afterAll(async () => {
  await f?.close();
});

const changes: [string, string, unknown][] = [
  ['POST', '/api/v1/dead-letters/retry', { filter: {} }],
  ['POST', '/api/v1/dead-letters/drop', { filter: {} }],
  ['POST', '/api/v1/replay', { sink: 'file', from: 'earliest' }],
  ['PUT', '/api/v1/sources/alpha/cursor', { cursor: 1 }],
];
const reads = [
  '/api/v1/status',
  '/api/v1/sources',
  '/api/v1/sinks',
  '/api/v1/dead-letters',
  '/api/v1/cursors',
];
const deadCount = async () => (await f.driver.admin.counts()).hook?.dead;
const metric = async (name: string, labels: string) =>
  Number(
    (await f.registry.metrics())
      .split('\n')
      .find((l) => l.startsWith(`${name}{${labels}}`))
      ?.split(' ')[1] ?? NaN,
  );

describe('authentication', () => {
  it.each([
    ['no Authorization header', undefined],
    ['a wrong token of the same length', 'x'.repeat(32)],
    ['a wrong token', 'nope'],
    ['an empty token', ''],
  ])('answers 401 with a Bearer challenge to %s, on reads and changes alike', async (_what, token) => {
    for (const path of reads) {
      const r = await call(f, token, 'GET', path);
      expect(r.status, path).toBe(401);
      expect(r.headers.get('www-authenticate')).toBe('Bearer realm="feedsync admin"');
      expect(r.body.error).toContain('bearer token');
    }
    for (const [method, path, body] of changes)
      expect((await call(f, token, method, path, body)).status).toBe(401);
    expect(await deadCount()).toBe(6);
  });

  it('does not take a token that only starts or ends like the write token, nor another scheme', async () => {
    for (const token of [f.writeToken.slice(0, -1), `${f.writeToken}x`, ` ${f.writeToken}x`])
      expect((await call(f, token, 'GET', '/api/v1/status')).status).toBe(401);
    const basic = await call(f, undefined, 'GET', '/api/v1/status', undefined, {
      authorization: `Basic ${Buffer.from(`admin:${f.writeToken}`).toString('base64')}`,
    });
    expect(basic.status).toBe(401);
    const lower = await call(f, undefined, 'GET', '/api/v1/status', undefined, {
      authorization: `bearer ${f.readToken}`,
    });
    expect(lower.status).toBe(200);
  });

  it('lets the read-only token read everything and change nothing (403), counting the refusals', async () => {
    for (const path of reads) expect((await call(f, f.readToken, 'GET', path)).status, path).toBe(200);
    const before = await metric(
      'feedsync_admin_requests_total',
      'route="/api/v1/dead-letters/drop",outcome="forbidden"',
    );
    for (const [method, path, body] of changes) {
      const r = await call(f, f.readToken, method, path, body);
      expect(r.status, path).toBe(403);
      expect(r.body.error).toBe('the read-only token may not change anything');
    }
    expect(await deadCount()).toBe(6);
    expect(
      await metric('feedsync_admin_requests_total', 'route="/api/v1/dead-letters/drop",outcome="forbidden"'),
    ).toBe(before + 1);
    expect(f.logs.filter((l) => l.action !== undefined)).toEqual([]);
  });

  it('audits each change: the token label, the action and how many; never the token itself', async () => {
    const dry = await call(f, f.writeToken, 'POST', '/api/v1/dead-letters/drop', {
      filter: { source: 'alpha' },
      dry_run: true,
    });
    expect(dry.body.count).toBe(3);
    const dropped = await call(f, f.writeToken, 'POST', '/api/v1/dead-letters/drop', {
      ids: [`hook/${f.dead[0]!.key}`],
    });
    expect(dropped.body.count).toBe(1);
    const audit = f.logs.filter((l) => l.action !== undefined);
    expect(audit).toMatchObject([
      {
        token: 'write',
        action: 'drop',
        dry_run: true,
        count: 3,
        target: { source: 'alpha' },
        msg: 'admin: drop (dry run) of 3',
      },
      {
        token: 'write',
        action: 'drop',
        dry_run: false,
        count: 1,
        target: { ids: 1 },
        msg: 'admin: drop of 1',
      },
    ]);
    const logged = JSON.stringify(f.logs);
    expect(logged).not.toContain(f.writeToken);
    expect(logged).not.toContain(f.readToken);
    expect(await metric('feedsync_admin_changes_total', 'action="drop"')).toBe(1);
    expect(
      await metric('feedsync_admin_requests_total', 'route="/api/v1/dead-letters/drop",outcome="ok"'),
    ).toBe(2);
    expect(await deadCount()).toBe(5);
  });
});

describe('requests', () => {
  const post = async (body: string, contentType = 'application/json') => {
    const r = await fetch(`${f.url}/api/v1/dead-letters/retry`, {
      method: 'POST',
      headers: { authorization: `Bearer ${f.writeToken}`, 'content-type': contentType },
      body,
    });
    return { status: r.status, body: (await r.json()) as { error: string } };
  };

  it('refuses a body over 64 KiB (413), invalid JSON (400, naming the problem) and another content type (415)', async () => {
    const big = await post(JSON.stringify({ ids: ['x'.repeat(70 * 1024)] }));
    expect(big.status).toBe(413);
    expect(big.body.error).toBe('request body over 65536 bytes');
    const bad = await post('{"filter": {');
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatch(/^request body is not valid JSON: /);
    const form = await post('filter=1', 'application/x-www-form-urlencoded');
    expect(form.status).toBe(415);
    expect(await deadCount()).toBe(5);
  });

  it('answers 404 to an unknown path and 405 (with Allow) to a wrong method', async () => {
    expect((await call(f, f.writeToken, 'GET', '/api/v1/nothing')).status).toBe(404);
    expect((await call(f, f.writeToken, 'GET', '/api/v2/status')).status).toBe(404);
    const wrong = await call(f, f.writeToken, 'DELETE', '/api/v1/status');
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get('allow')).toBe('GET');
    expect((await call(f, f.writeToken, 'GET', '/api/v1/replay')).status).toBe(405);
  });

  it('answers 400 to a request URL it cannot parse', async () => {
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(
        `${f.url}/`,
        { path: '//[', headers: { authorization: `Bearer ${f.writeToken}` } },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      req.on('error', reject);
      req.end();
    });
    expect(status).toBe(400);
  });

  it('sends headers that keep answers out of caches and frames', async () => {
    const r = await call(f, f.readToken, 'GET', '/api/v1/status');
    expect(r.headers.get('cache-control')).toBe('no-store');
    expect(r.headers.get('x-content-type-options')).toBe('nosniff');
    expect(r.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
  });
});

describe('token files', () => {
  const dir = tempDir('feedsync-admin-tokens-');
  const admin = (extra: Record<string, unknown>) => ({ enabled: true, host: '127.0.0.1', port: 0, ...extra });
  const fails = (extra: Record<string, unknown>) => {
    try {
      readAdminTokens(admin(extra), dir);
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      return (err as Error).message;
    }
    throw new Error('no ConfigError');
  };

  it('is a ConfigError naming the key when a token file is missing, empty or the two tokens are the same', () => {
    writeFileSync(join(dir, 'empty'), '\n  \n');
    writeFileSync(join(dir, 'a'), 'token-a\n');
    writeFileSync(join(dir, 'b'), 'token-b');
    expect(fails({ token_file: 'missing' })).toMatch(/^admin\.token_file: cannot read .*missing \(ENOENT\)$/);
    expect(fails({ token_file: 'empty' })).toMatch(/^admin\.token_file: .*empty is empty$/);
    expect(fails({ token_file: 'a', read_token_file: 'missing' })).toMatch(
      /^admin\.read_token_file: cannot read/,
    );
    expect(fails({ token_file: 'a', read_token_file: 'a' })).toContain(
      'admin.read_token_file: holds the same token',
    );
    const tokens = readAdminTokens(admin({ token_file: 'a', read_token_file: join(dir, 'b') }), dir);
    expect([
      tokens.roleOf('token-a'),
      tokens.roleOf('token-b'),
      tokens.roleOf('token-'),
      tokens.roleOf(''),
    ]).toEqual(['write', 'read', undefined, undefined]);
  });

  it('needs admin.token_file in the config when admin.enabled', () => {
    const raw = JSON.parse(JSON.stringify(adminConfig(dir, { driver: 'local' })));
    delete raw.admin.token_file;
    expect(() => validateConfig(raw, { dir })).toThrow(
      /^admin\.token_file: required when admin\.enabled is true/,
    );
    raw.admin.enabled = false;
    expect(validateConfig(raw, { dir }).admin).toEqual({
      enabled: false,
      host: '127.0.0.1',
      port: 0,
      read_token_file: 'read.token',
    });
  });
});
