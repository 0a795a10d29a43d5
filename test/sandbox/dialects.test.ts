// Every switch of the sandbox's dialects changes the wire exactly as docs/sandbox.md says: read with
// raw node:http (no decoding, no Digest code shared with src/) and checked against the wording of
// the specs, docs/sandbox.md and RFC 7616 / 2617 / 2069.
import { Agent } from 'node:http';
import { brotliDecompressSync, gunzipSync, inflateSync } from 'node:zlib';
import { XMLParser, XMLValidator } from 'fast-xml-parser';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/core/errors.js';
import {
  DIALECT_NAMES,
  resolveDialect,
  startSandbox,
  type DialectSpec,
  type Sandbox,
  type SandboxOptions,
} from '../../src/sandbox/index.js';
import { answer, digestGet, rawGet, splitChallenges, type RawResponse } from './raw-client.js';

const open: Sandbox[] = [];
afterAll(async () => {
  for (const sb of open.splice(0)) await sb.close();
});

async function sandbox(dialect: DialectSpec, opts: SandboxOptions = {}): Promise<Sandbox> {
  const sb = await startSandbox({ seed: 5, backlog: 120, dialect, ...opts });
  open.push(sb);
  return sb;
}

const JSON_ACCEPT = { accept: 'application/json' };
const XML_ACCEPT = { accept: 'application/xml' };

async function get(
  sb: Sandbox,
  path: string,
  headers: Record<string, string> = JSON_ACCEPT,
): Promise<RawResponse> {
  const res = await digestGet(`${sb.schedulingBaseUrl.replace(/\/scheduling$/, '')}${path}`, sb, headers);
  expect(res.status, `GET ${path}`).toBe(200);
  return res;
}

const text = (r: RawResponse) => r.body.toString('utf8');
const json = (r: RawResponse) => JSON.parse(text(r)) as Record<string, any>;

/** A live workflow job with at least one deadline, and one with none. */
function jobs(sb: Sandbox): { full: string; empty: string } {
  const all = Object.entries(sb.liveState('workflow')).filter(([, r]) => r.resource_type === 'job');
  const n = (r: any) => (r.deadlines.entries as unknown[]).length;
  const full = all.find(([, r]) => n(r) > 0)![0];
  const empty = all.find(([, r]) => n(r) === 0)![0];
  const path = (u: string) => new URL(u).pathname;
  return { full: path(full), empty: path(empty) };
}

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}/;

describe('dialect profiles and switches (JS API)', () => {
  it('every profile resolves; unknown profiles and switches, and bad values, name the culprit', () => {
    for (const name of DIALECT_NAMES) expect(resolveDialect(name).digestAlgorithms.length).toBeGreaterThan(0);
    expect(resolveDialect('default')).toMatchObject({
      digestAlgorithms: ['MD5'],
      digestQop: 'auth',
      collectionType: true,
    });
    expect(() => resolveDialect('nope' as never)).toThrow(/dialect: unknown dialect "nope"/);
    expect(() => resolveDialect({ xmlQuotes: 'single' } as never)).toThrow(
      /dialect\.xmlQuotes: unknown switch/,
    );
    expect(() => resolveDialect({ xmlQuote: 'back' } as never)).toThrow(
      /dialect\.xmlQuote: must be one of double, single/,
    );
    expect(() => resolveDialect({ digestAlgorithms: ['MD4'] } as never)).toThrow(ConfigError);
    expect(() => resolveDialect({ nonceTtlMs: -1 })).toThrow(/nonceTtlMs/);
  });
});

describe('JSON forms', () => {
  it('default: collections labelled, lists inside resources as {"entries":[…]}, charset, no BOM', async () => {
    const sb = await sandbox('default');
    const page = await get(sb, '/workflow/api/events?newer_than=0');
    expect(page.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(page.body[0]).toBe(0x7b);
    const body = json(page);
    expect(body.resource_type).toBe('events');
    expect(body).not.toHaveProperty('total_entries');
    const job = json(await get(sb, jobs(sb).full));
    expect(job.deadlines.entries[0]).toMatchObject({
      resource_type: 'deadline',
      due_at: expect.stringMatching(ISO),
    });
  });

  it('collections without resource_type, with total_entries / next_link / prev_link; bare lists; BOM; vendor type', async () => {
    const sb = await sandbox({
      collectionType: false,
      pagination: true,
      nestedLists: 'array',
      jsonBom: true,
      jsonContentType: 'vendor',
    });
    const page = await get(sb, '/scheduling/api/events?newer_than=0');
    expect(page.headers['content-type']).toMatch(/^application\/vnd\.[^;]+\+json$/);
    expect([...page.body.subarray(0, 3)]).toEqual([0xef, 0xbb, 0xbf]);
    const body = JSON.parse(text(page).slice(1));
    expect(body).not.toHaveProperty('resource_type');
    const ids = (body.entries as { id: number }[]).map((e) => e.id);
    expect(body.total_entries).toBe(sb.events('scheduling').length);
    expect(body.next_link).toBe(`${sb.schedulingBaseUrl}/api/events?newer_than=${Math.max(...ids)}`);
    expect(body.prev_link).toContain(`older_than=${Math.min(...ids)}`);
    // next_link really is the next page
    const nextUrl = new URL(body.next_link as string);
    const next = JSON.parse(text(await get(sb, nextUrl.pathname + nextUrl.search)).slice(1));
    expect(next.entries[0].id).toBeGreaterThan(Math.max(...ids));
    const { full, empty } = jobs(sb);
    const job = JSON.parse(text(await get(sb, full)).slice(1));
    expect(Array.isArray(job.deadlines)).toBe(true);
    expect(JSON.parse(text(await get(sb, empty)).slice(1)).deadlines).toEqual([]);
  });

  it.each([
    ['z', /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/],
    ['z-ms', /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/],
    ['offset', /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(Z|[+-]\d{2}:\d{2})$/],
    ['offset-ms', /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}(Z|[+-]\d{2}:\d{2})$/],
    ['offset-basic', /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{3})?[+-]\d{4}$/],
  ] as const)(
    'datetimes %s: every timestamp in that form, the same instant as the history',
    async (style, form) => {
      const sb = await sandbox({ datetimes: style });
      const body = json(await get(sb, '/workflow/api/events?newer_than=0'));
      const history = new Map(sb.events('workflow').map((e) => [e.id, e.occurred_at]));
      const stamps = (body.entries as { id: number; timestamp: string }[]).map((e) => {
        expect(e.timestamp).toMatch(form);
        // Date.parse reads ±hh:mm but not ±hhmm: put the colon back for the comparison only.
        const iso = e.timestamp.replace(/([+-]\d{2})(\d{2})$/, '$1:$2');
        expect(new Date(Date.parse(iso)).toISOString()).toBe(history.get(e.id));
        return e.timestamp;
      });
      if (style.startsWith('offset')) {
        expect(stamps.some((t) => /[+]0?1:?00$/.test(t))).toBe(true);
        expect(stamps.some((t) => /-05:?30$/.test(t))).toBe(true);
      }
    },
  );

  it('extras add a field and a link the specs do not list; nulls absent leaves null fields out', async () => {
    const sb = await sandbox('default');
    const withNull = Object.entries(sb.liveState('scheduling')).find(([, r]) =>
      Object.values(r).includes(null),
    );
    expect(withNull, 'the backlog has a resource with a null field').toBeDefined();
    const path = new URL(withNull![0]).pathname;
    const a = json(await get(sb, path));
    sb.setDialect({ extras: true, nulls: 'absent' });
    const b = json(await get(sb, path));
    const nullKeys = Object.keys(a).filter((k) => a[k] === null);
    expect(nullKeys.length).toBeGreaterThan(0);
    for (const k of nullKeys) expect(b).not.toHaveProperty(k);
    expect(b.history_link).toBe(`${a.self_link}/history`);
    expect(Number.isInteger(b.revision)).toBe(true);
    // What a client must end up with is what liveState says, in both formats.
    expect(sb.liveState('scheduling')[withNull![0]]).toEqual(b);
    const xml = text(await get(sb, path, XML_ACCEPT));
    expect(xml).toMatch(/<revision type="integer">\d+<\/revision>/);
    expect(xml).toContain(`<link rel="history" href="${a.self_link as string}/history"/>`);
    for (const k of nullKeys) expect(xml).not.toContain(`<${k.replace(/_/g, '-')} `);
  });
});

describe('embedded subjects and event ids', () => {
  it('embeddedLabel own-type: the scheduling feed embeds a subject under its own type, in JSON and XML', async () => {
    const sb = await sandbox({ embeddedLabel: 'own-type' });
    const page = json(await get(sb, '/scheduling/api/events?newer_than=0&expand=subject'));
    const embedded = (page.entries as { event_type: string; subject?: { resource_type: string } }[]).filter(
      (e) => e.subject,
    );
    expect(embedded.length).toBeGreaterThan(0);
    for (const e of embedded)
      expect(e.event_type.startsWith(`${e.subject!.resource_type}_`), e.event_type).toBe(true);
    const xml = text(await get(sb, '/scheduling/api/events?newer_than=0&expand=subject', XML_ACCEPT));
    expect(xml).toMatch(/<link rel="subject" href="[^"]+">\n\s*<(?!subject>)[a-z-]+>/);
    expect(xml).not.toContain('<subject>');
    const generic = await sandbox('default');
    expect(
      text(await get(generic, '/scheduling/api/events?newer_than=0&expand=subject', XML_ACCEPT)),
    ).toContain('<subject>');
  });

  it('unknownEventTypes: some events have a type no spec table lists, served like any other', async () => {
    const sb = await sandbox({ unknownEventTypes: true });
    const archived = sb.events('workflow').filter((e) => e.event_type.endsWith('_archived'));
    expect(archived.length).toBeGreaterThan(0);
    expect(archived.every((e) => e.operation === 'archived' && e.changes.length === 0)).toBe(true);
    const one = archived[0]!;
    const ev = json(await get(sb, new URL(one.event_url).pathname));
    expect(ev).toMatchObject({ event_type: one.event_type, subject_link: one.subject_url });
    // Off (the default), the same seed gives none.
    const plain = await sandbox('default');
    expect(plain.events('workflow').some((e) => e.event_type.endsWith('_archived'))).toBe(false);
  });

  it('eventIds large: every id above 2^31 and below 2^53, in the feed and in the history', async () => {
    const sb = await sandbox({ eventIds: 'large' });
    const ids = sb.events('workflow').map((e) => e.id);
    expect(Math.min(...ids)).toBeGreaterThan(2 ** 31);
    expect(Math.max(...ids)).toBeLessThan(2 ** 53);
    const page = json(await get(sb, `/workflow/api/events?newer_than=${ids[0]! - 1}`));
    expect((page.entries as { id: number }[]).map((e) => e.id)).toContain(ids[0]);
  });
});

describe('XML forms', () => {
  const parser = new XMLParser({ ignoreAttributes: false, attributeNamePrefix: '@' });

  it('default: declaration, double quotes, self-closed empty arrays, application/xml; charset', async () => {
    const sb = await sandbox('default');
    const res = await get(sb, jobs(sb).empty, XML_ACCEPT);
    expect(res.headers['content-type']).toBe('application/xml; charset=utf-8');
    expect(text(res)).toMatch(/^<\?xml version="1\.0" encoding="UTF-8"\?>\n<job>\n/);
    expect(text(res)).toContain('<deadlines type="array"/>');
    const full = await get(sb, jobs(sb).full, XML_ACCEPT);
    expect(text(full)).toMatch(/<deadlines type="array">\s*<deadline>\s*<name>/);
  });

  it('no declaration, single quotes, href before rel, CDATA, character references, one line, text/xml', async () => {
    const sb = await sandbox({
      xmlDeclaration: false,
      xmlQuote: 'single',
      xmlAttrOrder: 'href-first',
      xmlCdata: true,
      xmlCharRefs: true,
      xmlIndent: false,
      xmlContentType: 'text',
    });
    const res = await get(sb, '/scheduling/api/events?newer_than=0&expand=subject', XML_ACCEPT);
    const body = text(res);
    expect(res.headers['content-type']).toBe('text/xml');
    expect(body.startsWith("<events type='array'><event>")).toBe(true);
    expect(body).not.toContain('\n');
    expect(body).toMatch(/<link href='[^']+' rel='self'\/>/);
    expect(body).not.toMatch(/="/);
    expect(body).toContain('<![CDATA[');
    expect(body).toMatch(/&#\d{3,};/);
    // Outside CDATA (where references are not read) every non-ASCII character is a reference.
    expect(body.replace(/<!\[CDATA\[[\s\S]*?\]\]>/g, '')).not.toMatch(/[^\p{ASCII}]/u);
    expect(XMLValidator.validate(body)).toBe(true);
    // The same text as JSON says, once parsed.
    const parsed = parser.parse(body);
    expect(parsed.events.event.length).toBe(50);
  });

  it.each([
    ['open-close', /<deadlines type="array"><\/deadlines>/],
    ['whitespace', /<deadlines type="array">\n\s*\n\s*<\/deadlines>/],
  ] as const)('empty arrays %s', async (form, re) => {
    const sb = await sandbox({ xmlEmptyArray: form });
    const body = text(await get(sb, jobs(sb).empty, XML_ACCEPT));
    expect(body).toMatch(re);
    expect(XMLValidator.validate(body)).toBe(true);
  });

  it('pagination as total-entries and next/prev links; offsets without colon typed datetime', async () => {
    const sb = await sandbox({ pagination: true, datetimes: 'offset-basic', xmlContentType: 'text-charset' });
    const res = await get(sb, '/workflow/api/events?newer_than=0', XML_ACCEPT);
    expect(res.headers['content-type']).toBe('text/xml; charset=utf-8');
    const body = text(res);
    expect(body).toMatch(/<total-entries type="integer">\d+<\/total-entries>/);
    expect(body).toMatch(/<link rel="next" href="[^"]+newer_than=\d+"\/>/);
    expect(body).toMatch(/<timestamp type="datetime">[^<]+[+-]\d{4}<\/timestamp>/);
  });
});

describe('Digest forms', () => {
  const creds = (sb: Sandbox) => ({ username: sb.username, password: sb.password });

  it('MD5 with qop="auth" and opaque by default, on both services', async () => {
    const sb = await sandbox('default');
    for (const base of [sb.schedulingBaseUrl, sb.workflowBaseUrl]) {
      const first = await rawGet(`${base}/api`);
      expect(first.challenges).toHaveLength(1);
      expect(first.challenges[0]).toMatch(
        /^Digest realm="[^"]+", qop="auth", algorithm=MD5, nonce="[0-9a-f]+", opaque="[0-9a-f]+"$/,
      );
      expect((await digestGet(`${base}/api`, creds(sb))).status).toBe(200);
    }
  });

  it('several challenges as several headers or one header; each algorithm offered is accepted', async () => {
    const algos = ['SHA-256-sess', 'SHA-256', 'MD5-sess', 'MD5'] as const;
    for (const style of ['headers', 'one-header'] as const) {
      const sb = await sandbox({ digestAlgorithms: [...algos], digestChallenges: style });
      const first = await rawGet(`${sb.workflowBaseUrl}/api`);
      expect(first.challenges).toHaveLength(style === 'headers' ? 4 : 1);
      const offered = first.challenges.flatMap(splitChallenges);
      expect(offered.map((c) => c.algorithm)).toEqual(algos);
      for (const algo of algos) {
        const res = await digestGet(`${sb.workflowBaseUrl}/api`, creds(sb), {}, (chs) =>
          chs.find((c) => c.algorithm === algo)!,
        );
        expect(res.status, `${style} ${algo}`).toBe(200);
      }
    }
  });

  it('an algorithm not offered is refused', async () => {
    const sb = await sandbox({ digestAlgorithms: ['SHA-256'] });
    const ch = splitChallenges((await rawGet(`${sb.workflowBaseUrl}/api`)).challenges[0]!)[0]!;
    expect(ch.algorithm).toBe('SHA-256');
    const md5 = answer({ ...ch, algorithm: 'MD5' }, { ...creds(sb), uri: '/workflow/api', qop: 'auth' });
    expect((await rawGet(`${sb.workflowBaseUrl}/api`, { authorization: md5 })).status).toBe(401);
    const sha = answer(ch, { ...creds(sb), uri: '/workflow/api', qop: 'auth' });
    expect((await rawGet(`${sb.workflowBaseUrl}/api`, { authorization: sha })).status).toBe(200);
  });

  it('domain in the challenge; Authentication-Info nextnonce on success, and that nonce works', async () => {
    const sb = await sandbox({ digestDomain: true, digestNextnonce: true });
    const ch = splitChallenges((await rawGet(`${sb.workflowBaseUrl}/api`)).challenges[0]!)[0]!;
    expect(ch.domain).toBe('/workflow/');
    const ok = await rawGet(`${sb.workflowBaseUrl}/api`, {
      authorization: answer(ch, { ...creds(sb), uri: '/workflow/api', qop: 'auth' }),
    });
    expect(ok.status).toBe(200);
    const next = /^nextnonce="([0-9a-f]+)"$/.exec(String(ok.headers['authentication-info']))![1]!;
    expect(next).not.toBe(ch.nonce);
    const moved = answer({ ...ch, nonce: next }, { ...creds(sb), uri: '/workflow/api', qop: 'auth' });
    expect((await rawGet(`${sb.workflowBaseUrl}/api`, { authorization: moved })).status).toBe(200);
  });

  it('qop="auth,auth-int": both answers accepted', async () => {
    const sb = await sandbox({ digestQop: 'auth,auth-int' });
    const ch = splitChallenges((await rawGet(`${sb.workflowBaseUrl}/api`)).challenges[0]!)[0]!;
    expect(ch.qop).toBe('auth,auth-int');
    for (const [nc, qop] of [
      [1, 'auth'],
      [2, 'auth-int'],
    ] as const) {
      const auth = answer(ch, { ...creds(sb), uri: '/workflow/api', nc, qop });
      expect((await rawGet(`${sb.workflowBaseUrl}/api`, { authorization: auth })).status, qop).toBe(200);
    }
  });

  it('RFC 2069: no qop, no opaque, no algorithm; response = H(HA1:nonce:HA2); a qop answer is refused', async () => {
    const sb = await sandbox('digest-legacy');
    const first = await rawGet(`${sb.schedulingBaseUrl}/api`);
    expect(first.challenges[0]).toMatch(/^Digest realm="[^"]+", nonce="[0-9a-f]+"$/);
    const ch = splitChallenges(first.challenges[0]!)[0]!;
    const legacy = answer(ch, { ...creds(sb), uri: '/scheduling/api' });
    expect((await rawGet(`${sb.schedulingBaseUrl}/api`, { authorization: legacy })).status).toBe(200);
    const modern = answer(ch, { ...creds(sb), uri: '/scheduling/api', qop: 'auth' });
    expect((await rawGet(`${sb.schedulingBaseUrl}/api`, { authorization: modern })).status).toBe(401);
  });

  it('nonces used up after nonceMaxUses: 401 stale=true, and a fresh nonce works again', async () => {
    const sb = await sandbox({ nonceMaxUses: 3 });
    const ch = splitChallenges((await rawGet(`${sb.schedulingBaseUrl}/api`)).challenges[0]!)[0]!;
    for (let nc = 1; nc <= 3; nc++) {
      const auth = answer(ch, { ...creds(sb), uri: '/scheduling/api', nc, qop: 'auth' });
      expect((await rawGet(`${sb.schedulingBaseUrl}/api`, { authorization: auth })).status).toBe(200);
    }
    const fourth = await rawGet(`${sb.schedulingBaseUrl}/api`, {
      authorization: answer(ch, { ...creds(sb), uri: '/scheduling/api', nc: 4, qop: 'auth' }),
    });
    expect(fourth.status).toBe(401);
    const again = splitChallenges(fourth.challenges[0]!)[0]!;
    expect(again.stale).toBe('true');
    const fresh = answer(again, { ...creds(sb), uri: '/scheduling/api', qop: 'auth' });
    expect((await rawGet(`${sb.schedulingBaseUrl}/api`, { authorization: fresh })).status).toBe(200);
  });
});

describe('feed order without newer_than (workflow)', () => {
  it.each(['oldest', 'newest'] as const)('%s 50, listed oldest first', async (which) => {
    const sb = await sandbox({ workflowUnbounded: which });
    const byTs = sb
      .events('workflow')
      .sort((a, b) => Date.parse(a.occurred_at) - Date.parse(b.occurred_at) || a.id - b.id)
      .map((e) => e.id);
    const page = json(await get(sb, '/workflow/api/events'));
    const ids = (page.entries as { id: number }[]).map((e) => e.id);
    expect(ids).toEqual(which === 'oldest' ? byTs.slice(0, 50) : byTs.slice(-50));
  });
});

describe('HTTP forms', () => {
  it.each([
    ['gzip', gunzipSync],
    ['deflate', inflateSync],
    ['br', brotliDecompressSync],
  ] as const)(
    'Content-Encoding %s when Accept-Encoding asks for it, identity otherwise',
    async (coding, decode) => {
      const sb = await sandbox('default');
      const plain = await get(sb, '/workflow/api/events?newer_than=0');
      expect(plain.headers['content-encoding']).toBeUndefined();
      const res = await get(sb, '/workflow/api/events?newer_than=0', {
        ...JSON_ACCEPT,
        'accept-encoding': `${coding}, identity;q=0.5`,
      });
      expect(res.headers['content-encoding']).toBe(coding);
      expect(res.body.length).toBeLessThan(plain.body.length);
      expect(decode(res.body).equals(plain.body)).toBe(true);
      const off = await sandbox('strict-spec');
      expect(
        (await get(off, '/workflow/api/events?newer_than=0', { ...JSON_ACCEPT, 'accept-encoding': coding }))
          .headers['content-encoding'],
      ).toBeUndefined();
    },
  );

  it('chunked transfer encoding or Content-Length', async () => {
    const chunked = await get(await sandbox({ transfer: 'chunked' }), '/scheduling/api/events?newer_than=0');
    expect(chunked.headers['transfer-encoding']).toBe('chunked');
    expect(chunked.headers['content-length']).toBeUndefined();
    const framed = await get(await sandbox('default'), '/scheduling/api/events?newer_than=0');
    expect(framed.headers['transfer-encoding']).toBeUndefined();
    expect(Number(framed.headers['content-length'])).toBe(framed.body.length);
  });

  it('closes an idle keep-alive connection after idleCloseMs while its Keep-Alive header promises more', async () => {
    const sb = await sandbox({ idleCloseMs: 100 });
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const res = await rawGet(`${sb.workflowBaseUrl}/api`, {}, agent);
      expect(res.status).toBe(401);
      expect(res.headers.connection).toBe('keep-alive');
      expect(res.headers['keep-alive']).toMatch(/timeout=(\d+)/);
      expect(Number(/timeout=(\d+)/.exec(String(res.headers['keep-alive']))![1])).toBeGreaterThan(1);
      const socket = Object.values(agent.freeSockets).flat()[0]!;
      const closedAfter = await new Promise<number>((resolve) => {
        const t0 = Date.now();
        socket.once('close', () => resolve(Date.now() - t0));
      });
      expect(closedAfter).toBeGreaterThanOrEqual(50);
      expect(closedAfter).toBeLessThan(2000);
    } finally {
      agent.destroy();
    }
  });
});

describe('switching the dialect at run time', () => {
  it('control API: GET and POST /_control/dialect; a bad switch is a 400 naming it', async () => {
    const sb = await sandbox('default');
    const now = await (await fetch(`${sb.controlUrl}/dialect`)).json();
    expect(now).toMatchObject({ digestAlgorithms: ['MD5'], xmlQuote: 'double' });
    const set = await fetch(`${sb.controlUrl}/dialect`, {
      method: 'POST',
      body: JSON.stringify({ profile: 'rails', xmlQuote: 'single' }),
    });
    expect(set.status).toBe(200);
    expect(await set.json()).toMatchObject({
      nestedLists: 'array',
      xmlQuote: 'single',
      xmlDeclaration: false,
    });
    expect(text(await get(sb, '/workflow/api', XML_ACCEPT))).toMatch(/^<workflow>\n {2}<link rel='events'/);
    const bad = await fetch(`${sb.controlUrl}/dialect`, { method: 'POST', body: '{"xmlQuote":"back"}' });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: string }).error).toMatch(/dialect\.xmlQuote/);
  });
});
