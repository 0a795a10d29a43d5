// A reverse proxy in front of the sandbox that damages feed pages at random (seeded): broken
// bodies, error statuses, HTML error pages, wrong content types. Digest auth passes through
// untouched (same path, same headers), so the client under test authenticates against the sandbox.
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { breakFeedPage, rng, type Format } from './mutate.js';

export interface CorruptingProxy {
  origin: string;
  /** Share of authenticated feed responses to damage (0..1). */
  rate: number;
  /** What was done, by kind. */
  readonly damage: Record<string, number>;
  close(): Promise<void>;
}

type Reply = { status: number; headers: Record<string, string>; body: Buffer };

const REPLACEMENTS: ((real: Reply, format: Format) => Reply)[] = [
  () => text(500, 'text/plain', 'Internal Server Error'),
  () => text(503, 'text/plain', 'Service Unavailable'),
  () => ({
    ...text(429, 'text/plain', 'slow down'),
    headers: { 'content-type': 'text/plain', 'retry-after': '0' },
  }),
  () => text(200, 'text/html', '<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>'),
  (_, f) => text(200, `application/${f}; charset=utf-8`, ''),
  // The right body labelled with the other format.
  (real, f) => ({ ...real, headers: { 'content-type': `application/${f === 'json' ? 'xml' : 'json'}` } }),
  () => text(200, 'application/octet-stream', '\u0000\u0001\u0002 binary'),
];

function text(status: number, contentType: string, body: string): Reply {
  return { status, headers: { 'content-type': contentType }, body: Buffer.from(body, 'utf8') };
}

export async function startCorruptingProxy(target: string, seed: number): Promise<CorruptingProxy> {
  const r = rng(seed);
  const targetUrl = new URL(target);
  const sockets = new Set<Socket>();
  const proxy: CorruptingProxy = {
    origin: '',
    rate: 0.5,
    damage: {},
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
  const count = (what: string) => (proxy.damage[what] = (proxy.damage[what] ?? 0) + 1);

  const server: Server = createServer((req, res) => {
    const upstream = request(
      {
        host: targetUrl.hostname,
        port: targetUrl.port,
        method: req.method,
        path: req.url,
        headers: { ...req.headers, host: targetUrl.host },
      },
      (up: IncomingMessage) => {
        const chunks: Buffer[] = [];
        up.on('data', (c: Buffer) => chunks.push(c));
        up.on('end', () => {
          let reply: Reply = {
            status: up.statusCode ?? 502,
            headers: Object.fromEntries(
              Object.entries(up.headers)
                .filter(
                  ([k]) => !['content-length', 'transfer-encoding', 'connection', 'keep-alive'].includes(k),
                )
                .map(([k, v]) => [k, String(v)]),
            ),
            body: Buffer.concat(chunks),
          };
          const isFeed = /\/api\/events(\?|$)/.test(req.url ?? '');
          if (isFeed && reply.status === 200 && r.next() < proxy.rate) reply = damage(reply);
          res.writeHead(reply.status, { ...reply.headers, 'content-length': String(reply.body.length) });
          res.end(reply.body);
        });
        up.on('error', () => res.destroy());
      },
    );
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  });

  function damage(real: Reply): Reply {
    const format: Format = (real.headers['content-type'] ?? '').includes('json') ? 'json' : 'xml';
    if (r.next() < 0.6) {
      const [body, what] = breakFeedPage(real.body.toString('utf8'), format, r);
      count(what);
      return { ...real, body: Buffer.from(body, 'utf8') };
    }
    const i = r.int(REPLACEMENTS.length);
    count(`replacement ${i}`);
    return REPLACEMENTS[i]!(real, format);
  }

  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  proxy.origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return proxy;
}
