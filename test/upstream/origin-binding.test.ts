// Credentials are bound to their origin (issue #19): the client fetches a link only on base_url's
// origin or one of the source's allowed_origins, never from https down to http, and refuses
// anything else before opening a socket or computing an Authorization. Real loopback servers.
import { afterEach, describe, expect, it } from 'vitest';
import { validateConfig } from '../../src/config/load.js';
import { REFUSAL_REASONS, UpstreamRefusedError } from '../../src/core/errors.js';
import { PipelineEvents } from '../../src/core/events.js';
import {
  createUpstreamClient,
  sourceClientOptions,
  type UpstreamClient,
  type UpstreamClientOptions,
} from '../../src/upstream/client.js';
import { configError, minimalRaw } from '../config/helpers.js';
import { DigestServer, type Reply } from './support/digest-server.js';

const USER = 'feedsync';
const PASSWORD = 'origin-bound s3cret';
const TITLE: Reply = {
  status: 200,
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ resource_type: 'title', id: 42, name: 'Pilot' }),
};

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function server(realm?: string): Promise<DigestServer> {
  const s = await DigestServer.start({ username: USER, password: PASSWORD, ...(realm && { realm }) });
  s.route('/api/titles/42', TITLE);
  cleanups.push(() => s.close());
  return s;
}

interface Recorded {
  client: UpstreamClient;
  refused: { source: string; reason: string; url: string }[];
  responses: string[];
}

function client(opts: Partial<UpstreamClientOptions>): Recorded {
  const events = new PipelineEvents();
  const refused: Recorded['refused'] = [];
  const responses: string[] = [];
  events.on('upstream:refused', (e) => refused.push(e));
  events.on('http:response', (e) => responses.push(e.code));
  const c = createUpstreamClient({
    source: 'scheduling',
    username: USER,
    password: PASSWORD,
    format: 'json',
    timeoutMs: 2000,
    retry: { attempts: 4, baseMs: 1, maxMs: 5 },
    events,
    ...opts,
  });
  cleanups.push(() => c.close());
  return { client: c, refused, responses };
}

async function refusal(p: Promise<unknown>): Promise<UpstreamRefusedError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(UpstreamRefusedError);
    return err as UpstreamRefusedError;
  }
  throw new Error('expected a refusal');
}

describe('links to another origin', () => {
  it('a subject link on a foreign origin is refused: the foreign server gets no request at all', async () => {
    const home = await server();
    const foreign = await server('evil@127.0.0.1');
    const { client: c, refused, responses } = client({ baseUrl: `${home.origin}/scheduling` });
    expect(await c.get(home.url('/api/titles/42'), { kind: 'subject' })).toMatchObject({ status: 200 });

    const link = foreign.url('/api/titles/42');
    const err = await refusal(c.get(link, { kind: 'subject' }));
    expect(err).toMatchObject({ reason: 'foreign_origin', url: link, retryable: false });
    expect(err.message).toBe(
      `refused GET ${link}: ${foreign.origin} is neither base_url's origin (${home.origin}) nor one of the ` +
        `allowed_origins of source scheduling; if it is trusted with the source's credentials, add ` +
        `"${foreign.origin}" to sources[].allowed_origins`,
    );
    // No socket, no Authorization: the foreign origin never saw a request, let alone a Digest response.
    expect(foreign.requests).toEqual([]);
    expect(refused).toEqual([{ source: 'scheduling', reason: 'foreign_origin', url: link }]);
    expect(responses).toEqual(['401', '200']);
    expect(c.stats()).toEqual({ requests: 2, unauthorized: 1 });
  });

  it('another port or scheme of the same host is another origin', async () => {
    const home = await server();
    const other = await server();
    const { client: c, refused } = client({ baseUrl: home.origin });
    for (const link of [other.url('/api/titles/42'), home.url('/api/titles/42').replace('http:', 'https:')]) {
      expect((await refusal(c.get(link, { kind: 'subject' }))).reason).toBe('foreign_origin');
    }
    expect(other.requests).toEqual([]);
    expect(home.requests).toEqual([]);
    expect(refused.map((r) => r.reason)).toEqual(['foreign_origin', 'foreign_origin']);
  });

  it('a link from an https base_url to http is refused, whatever the host', async () => {
    const plain = await server();
    const { client: c, refused } = client({
      baseUrl: 'https://127.0.0.1:1/scheduling',
      // Even an allowed origin (a config check refuses this one; the client does not rely on it).
      allowedOrigins: [plain.origin],
    });
    const link = plain.url('/api/titles/42');
    const err = await refusal(c.get(link, { kind: 'subject' }));
    expect(err).toMatchObject({ reason: 'insecure_link', url: link });
    expect(err.message).toBe(
      `refused GET ${link}: the link is http but base_url https://127.0.0.1:1 is https; ` +
        'feedsync never downgrades from https to http',
    );
    expect(plain.requests).toEqual([]);
    expect(refused).toEqual([{ source: 'scheduling', reason: 'insecure_link', url: link }]);
  });

  it('an allowed origin is fetched with the credentials and its own Digest challenge', async () => {
    const home = await server('home@127.0.0.1');
    const cdn = await server('cdn@127.0.0.1');
    const {
      client: c,
      refused,
      responses,
    } = client({ baseUrl: home.origin, allowedOrigins: [`${cdn.origin}/`] });
    for (let i = 0; i < 3; i++) {
      expect(await c.get(home.url('/api/titles/42'), { kind: 'subject' })).toMatchObject({ status: 200 });
      expect(await c.get(cdn.url('/api/titles/42'), { kind: 'subject' })).toMatchObject({ status: 200 });
    }
    // Each origin challenged once, then answered pre-emptively, with its own realm and nonce.
    for (const [s, realm] of [
      [home, 'home@127.0.0.1'],
      [cdn, 'cdn@127.0.0.1'],
    ] as const) {
      expect(s.requests.map((r) => r.outcome)).toEqual(['401', '200', '200', '200']);
      for (const r of s.requests.slice(1)) expect(r.authorization).toContain(`realm="${realm}"`);
    }
    expect(refused).toEqual([]);
    expect(responses).toHaveLength(8);
  });

  it('without baseUrl, the first URL requested binds the client', async () => {
    const first = await server();
    const second = await server();
    const { client: c } = client({});
    expect(await c.get(first.url('/api/titles/42'), { kind: 'feed' })).toMatchObject({ status: 200 });
    expect((await refusal(c.get(second.url('/api/titles/42'), { kind: 'subject' }))).reason).toBe(
      'foreign_origin',
    );
    expect(second.requests).toEqual([]);
  });

  it('credentials in a refused link never reach the error or the event', async () => {
    const home = await server();
    const { client: c, refused } = client({ baseUrl: home.origin });
    const err = await refusal(c.get('https://someone:hunter2@other.invalid/x', { kind: 'subject' }));
    expect(err.url).toBe('https://other.invalid/x');
    expect(`${err.message} ${JSON.stringify(refused)}`).not.toContain('hunter2');
  });
});

describe('unusable links', () => {
  it.each([
    [
      'file:///etc/passwd',
      'refused GET file:///etc/passwd: only http and https links can be fetched, not file:',
    ],
    ['not a url', 'refused GET "not a url": the link is not a URL'],
    ['ftp://x', 'refused GET ftp://x/: only http and https links can be fetched, not ftp:'],
    ['//user:pw@x/relative', 'refused GET "//x/relative": the link is not a URL'],
  ])('%s is refused as unusable_link, once, without a request', async (link, message) => {
    const home = await server();
    const { client: c, refused, responses } = client({ baseUrl: home.origin });
    const err = await refusal(c.get(link, { kind: 'subject' }));
    expect(err.reason).toBe('unusable_link');
    expect(err.message).toBe(message);
    expect(refused).toEqual([{ source: 'scheduling', reason: 'unusable_link', url: err.url }]);
    expect(responses).toEqual([]);
    expect(home.requests).toEqual([]);
  });

  it('a huge link is shown shortened', async () => {
    const { client: c } = client({ baseUrl: 'http://127.0.0.1:1' });
    const err = await refusal(c.get(`no url ${'x'.repeat(100_000)}`, { kind: 'subject' }));
    expect(err.message.length).toBeLessThan(400);
  });

  it('every refusal reason is a non-retryable error, reported once per get', async () => {
    const home = await server();
    const { client: c, refused } = client({ baseUrl: home.origin });
    await refusal(c.get('ftp://x', { kind: 'subject' }));
    await refusal(c.get('http://127.0.0.1:1/x', { kind: 'subject' }));
    expect(refused.map((r) => r.reason)).toEqual(['unusable_link', 'foreign_origin']);
    expect(REFUSAL_REASONS).toContain('foreign_origin');
  });
});

describe('configuration', () => {
  it('an http allowed origin is refused for an https base_url', () => {
    const raw = minimalRaw();
    raw.sources[0].base_url = 'https://sched.example.com/api-root';
    raw.sources[0].allowed_origins = ['https://cdn.example.com', 'http://cdn.example.com:8080'];
    const err = configError(() => validateConfig(raw, { dir: '/' }));
    expect(err.message).toContain(
      'sources[0].allowed_origins[1]: http://cdn.example.com:8080 is http but base_url is https ' +
        '(never downgrade from https to http)',
    );
    expect(err.message).not.toContain('allowed_origins[0]');
  });

  it('an http base_url may allow http and https origins; the client gets them all', () => {
    const raw = minimalRaw();
    // Plain http off loopback needs the source's consent (test/config/insecure-http.test.ts).
    raw.sources[0].allow_insecure_http = true;
    raw.sources[0].allowed_origins = ['http://cdn.example.com:8080/', 'https://CDN.example.com:443'];
    raw.sources[0].max_body_bytes = 1 << 20;
    const config = validateConfig(raw, { dir: '/' });
    expect(sourceClientOptions(config.sources[0]!)).toMatchObject({
      source: 'sched',
      baseUrl: 'http://127.0.0.1:4010/scheduling',
      allowedOrigins: ['http://cdn.example.com:8080', 'https://cdn.example.com'],
      maxBodyBytes: 1 << 20,
      compression: true,
    });
  });
});
