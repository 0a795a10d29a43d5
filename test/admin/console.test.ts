// The console's side of the listener without a browser: its files served offline under a strict
// Content-Security-Policy, login into an HttpOnly SameSite=Strict cookie (Secure behind https),
// and the refusals that keep another site from using a session: a change without the session's
// CSRF token, from another Origin, or cross-site; a forged, stale or expired cookie.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SESSION_TTL_MS, Sessions } from '../../src/admin/sessions.js';
import { readAdminTokens } from '../../src/admin/tokens.js';
import { call, openAdminFixture, type AdminFixture } from './support.js';

let f: AdminFixture;
beforeAll(async () => {
  f = await openAdminFixture({ queue: () => ({ driver: 'local' }) });
}, 60_000);
afterAll(async () => {
  await f?.close();
});

/** Logs in with `token`; the session's cookie and CSRF token. */
async function login(token: string, headers: Record<string, string> = {}) {
  const r = await call(f, undefined, 'POST', '/login', { token }, headers);
  const setCookie = r.headers.get('set-cookie') ?? '';
  return { status: r.status, body: r.body, setCookie, cookie: setCookie.split(';')[0] ?? '' };
}

const origin = () => f.url;
const tokenConfig = { enabled: true, host: '127.0.0.1', port: 0 };
const dryRetry = (headers: Record<string, string>) =>
  call(f, undefined, 'POST', '/api/v1/dead-letters/retry', { filter: {}, dry_run: true }, headers);

describe('the console files', () => {
  it('are served from the package with a CSP that allows only them: no inline script, no framing', async () => {
    const page = await fetch(`${f.url}/`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    const csp = page.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("default-src 'self'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).not.toContain('unsafe');
    const html = await page.text();
    expect(html).toContain('<script type="module" src="/console.js"></script>');
    const js = await fetch(`${f.url}/console.js`);
    expect(js.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    const code = await js.text();
    expect(code).toBe(readFileSync(new URL('../../src/admin/console/console.js', import.meta.url), 'utf8'));
    // Offline: nothing fetched from elsewhere (the SVG namespace is a name, not a fetch).
    for (const text of [html, code, await (await fetch(`${f.url}/console.css`)).text()])
      expect(text.replaceAll('http://www.w3.org/2000/svg', '').match(/https?:\/\/|\/\/cdn/g)).toBeNull();
    // Data reaches the page as text nodes only: no HTML parser is ever handed a string.
    expect(code).not.toMatch(/innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function/);
    expect((await fetch(`${f.url}/console.js/../../package.json`)).status).toBe(404);
  });
});

describe('login', () => {
  it('gives an HttpOnly, SameSite=Strict session cookie (Secure behind https) and a CSRF token; never for a wrong token', async () => {
    const wrong = await login('not-the-token');
    expect(wrong.status).toBe(401);
    expect(wrong.setCookie).toBe('');
    for (let i = 0; i < 5; i++) expect((await login(`guess-${i}`)).status).toBe(401);
    // Logged once a minute at most, never with what was tried.
    const refused = f.logs.filter((l) => l.msg === 'admin: console login refused (wrong token)');
    expect(refused).toHaveLength(1);
    expect(JSON.stringify(f.logs)).not.toMatch(/not-the-token|guess-/);
    const plain = await login(f.writeToken);
    expect(plain.status).toBe(200);
    expect(plain.body).toEqual({ role: 'write', csrf: expect.stringMatching(/^[\w-]{40,}$/) });
    expect(plain.setCookie).toMatch(
      /^feedsync_admin=write\.\d+\.[\w-]{32}\.[\w-]{43}; Path=\/; HttpOnly; SameSite=Strict; Max-Age=28800$/,
    );
    const secure = await login(f.writeToken, {
      'x-forwarded-proto': 'https',
      origin: origin().replace('http:', 'https:'),
    });
    expect(secure.setCookie).toMatch(/; Secure$/);
    expect(plain.setCookie).not.toContain(f.writeToken);
    const session = await call(f, undefined, 'GET', '/api/v1/session', undefined, { cookie: plain.cookie });
    expect(session.body).toEqual(plain.body);
  });

  it('is refused from another origin', async () => {
    const r = await login(f.writeToken, { origin: 'https://evil.example' });
    expect(r.status).toBe(403);
    expect(r.setCookie).toBe('');
  });
});

describe('a cookie session', () => {
  it('changes only with its CSRF token, from its own origin, not cross-site', async () => {
    const { cookie, body } = await login(f.writeToken);
    const same = { cookie, origin: origin() };
    expect((await dryRetry(same)).body.error).toBe(
      'refused: missing or wrong CSRF token (the x-csrf-token header)',
    );
    expect((await dryRetry({ ...same, 'x-csrf-token': 'forged' })).status).toBe(403);
    const other = await dryRetry({ cookie, origin: 'https://evil.example', 'x-csrf-token': body.csrf });
    expect(other.status).toBe(403);
    expect(other.body.error).toBe('refused: the request comes from another origin');
    expect(
      (await dryRetry({ ...same, 'x-csrf-token': body.csrf, 'sec-fetch-site': 'cross-site' })).status,
    ).toBe(403);
    const ok = await dryRetry({ ...same, 'x-csrf-token': body.csrf, 'sec-fetch-site': 'same-origin' });
    expect(ok.status).toBe(200);
    expect(ok.body.count).toBe(6);
    // Reads need no CSRF token.
    expect((await call(f, undefined, 'GET', '/api/v1/sources', undefined, { cookie })).status).toBe(200);
  });

  it('of the read token reads and may not change, CSRF token or not', async () => {
    const { cookie, body } = await login(f.readToken);
    expect(body.role).toBe('read');
    expect((await call(f, undefined, 'GET', '/api/v1/status', undefined, { cookie })).status).toBe(200);
    const r = await dryRetry({ cookie, origin: origin(), 'x-csrf-token': body.csrf });
    expect(r.status).toBe(403);
    expect(r.body.error).toBe('the read-only token may not change anything');
  });

  it('is 401 with a forged cookie, after logout, and when a bearer token sent with it is wrong', async () => {
    const { cookie, body } = await login(f.writeToken);
    expect(
      (await call(f, undefined, 'GET', '/api/v1/status', undefined, { cookie: 'feedsync_admin=forged' }))
        .status,
    ).toBe(401);
    expect((await call(f, 'wrong', 'GET', '/api/v1/status', undefined, { cookie })).status).toBe(401);
    const out = await call(f, undefined, 'POST', '/logout', undefined, {
      cookie,
      origin: origin(),
      'x-csrf-token': body.csrf,
    });
    expect(out.status).toBe(200);
    expect(out.headers.get('set-cookie')).toMatch(/^feedsync_admin=; .*Max-Age=0/);
    expect((await call(f, undefined, 'GET', '/api/v1/status', undefined, { cookie })).status).toBe(401);
  });

  it('is signed: any process with the same tokens takes it, a changed role or token does not, nor an expired one', () => {
    let now = 0;
    const key = (t: string) => readAdminTokens({ ...tokenConfig, token_file: t }, f.dir).sessionKey;
    const here = new Sessions(key('write.token'), () => now);
    const replica = new Sessions(key('write.token'), () => now);
    const rotated = new Sessions(key('read.token'), () => now);
    const req = (value: string) => ({ headers: { cookie: `a=b; feedsync_admin=${value}` } }) as never;
    const { cookie, session } = here.create('read');
    expect(replica.of(req(cookie))).toEqual(session);
    expect(session.csrf).not.toBe(here.create('read').session.csrf);
    expect(rotated.of(req(cookie))).toBeUndefined();
    expect(here.of(req(cookie.replace(/^read\./, 'write.')))).toBeUndefined();
    const [role, expires, id, mac] = cookie.split('.');
    expect(here.of(req([role, Number(expires) + 60_000, id, mac].join('.')))).toBeUndefined();
    here.revoke(session);
    expect(here.of(req(cookie))).toBeUndefined();
    now += SESSION_TTL_MS;
    expect(replica.of(req(cookie))).toBeUndefined();
  });
});
