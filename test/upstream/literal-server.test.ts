// The reproduction: a workflow feed served the way the spec's words read literally (JSON
// collections without resource_type, no XML declaration, newest-first or oldest-first when
// newer_than is omitted), read through the real client. Hand-written, apart from the sandbox.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { readFeedEvents } from '../../src/pipeline/feed-page.js';
import { findLatestEventId } from '../../src/pipeline/poller.js';
import { createUpstreamClient } from '../../src/upstream/client.js';

const TOTAL = 120;
const PAGE = 50;

interface Ev {
  id: number;
  type: string;
  at: string;
}

const EVENTS: Ev[] = Array.from({ length: TOTAL }, (_, i) => ({
  id: 1000 + i * 3,
  type: i % 3 === 0 ? 'job_created' : 'task_updated',
  at: new Date(Date.UTC(2026, 10, 20, 10, 0, i)).toISOString().replace('.000Z', '+00:00'),
}));

function jsonPage(events: Ev[], base: string): string {
  return JSON.stringify({
    entries: events.map((e) => ({
      resource_type: 'event',
      id: e.id,
      event_type: e.type,
      timestamp: e.at,
      ...(e.type.endsWith('_updated') ? { changes: 'name, status' } : {}),
      self_link: `${base}/api/events/${e.id}`,
      subject_link: `${base}/api/jobs/${e.id}`,
    })),
  });
}

function xmlPage(events: Ev[], base: string): string {
  const items = events.map(
    (e) =>
      `<event><id type="integer">${e.id}</id><event-type>${e.type}</event-type><timestamp type="datetime">${e.at}</timestamp>${
        e.type.endsWith('_updated') ? '<changes>name, status</changes>' : ''
      }<link rel="self" href="${base}/api/events/${e.id}"/><link rel="subject" href="${base}/api/jobs/${e.id}"/></event>`,
  );
  return items.length ? `<events type="array">${items.join('')}</events>` : '<events type="array"/>';
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function literalServer(noCursor: 'oldest-first' | 'newest-first'): Promise<string> {
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const base = `http://${req.headers.host}`;
    const newerThan = url.searchParams.get('newer_than');
    let events: Ev[];
    if (newerThan === null)
      events = noCursor === 'oldest-first' ? EVENTS.slice(0, PAGE) : EVENTS.slice(-PAGE).reverse();
    else events = EVENTS.filter((e) => e.id > Number(newerThan)).slice(0, PAGE);
    // "with none, XML is returned"
    const json = req.headers.accept === 'application/json';
    const body = json ? jsonPage(events, base) : xmlPage(events, base);
    const gzip = /\bgzip\b/.test(req.headers['accept-encoding'] ?? '');
    res.writeHead(200, {
      'content-type': json ? 'application/json' : 'application/xml',
      ...(gzip ? { 'content-encoding': 'gzip' } : {}),
    });
    res.end(gzip ? gzipSync(body) : body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function client(format: 'json' | 'xml') {
  const c = createUpstreamClient({ source: 'wf', username: 'u', password: 'p', format, timeoutMs: 3000 });
  cleanups.push(() => c.close());
  return c;
}

describe('a literal-spec workflow feed', () => {
  it.each(['json', 'xml'] as const)(
    '%s: every event is read, once, in order, by newer_than',
    async (format) => {
      const base = await literalServer('oldest-first');
      const c = client(format);
      const ids: number[] = [];
      let cursor = 0;
      for (let guard = 0; guard < 10; guard++) {
        const url = `${base}/api/events?newer_than=${cursor}`;
        const res = await c.get(url, { kind: 'feed' });
        if (res.status !== 200) throw new Error(`HTTP ${res.status}`);
        const events = readFeedEvents(res.resource, url);
        ids.push(...events.map((e) => e.id));
        if (events.length < PAGE) break;
        cursor = events.at(-1)!.id;
      }
      expect(ids).toEqual(EVENTS.map((e) => e.id));
    },
  );

  it('JSON and XML pages read to deep-equal events', async () => {
    const base = await literalServer('oldest-first');
    const url = `${base}/api/events?newer_than=1000`;
    const read = async (format: 'json' | 'xml') => {
      const res = await client(format).get(url, { kind: 'feed' });
      if (res.status !== 200) throw new Error(`HTTP ${res.status}`);
      return readFeedEvents(res.resource, url);
    };
    const [fromJson, fromXml] = await Promise.all([read('json'), read('xml')]);
    expect(fromJson).toHaveLength(PAGE);
    expect(fromXml).toStrictEqual(fromJson);
  });

  it.each(['oldest-first', 'newest-first'] as const)(
    'F1: start_from latest finds the newest event when the feed without newer_than answers %s',
    async (noCursor) => {
      const base = await literalServer(noCursor);
      for (const format of ['json', 'xml'] as const)
        expect(await findLatestEventId(client(format), base)).toBe(EVENTS.at(-1)!.id);
    },
  );
});
