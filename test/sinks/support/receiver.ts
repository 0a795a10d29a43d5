// A real HTTP webhook receiver on 127.0.0.1:0, behaving like a careful consumer: it verifies the
// signatures (Standard Webhooks and the deprecated X-Feedsync-Signature), de-duplicates by
// X-Feedsync-Key and can be told to fail in the ways sinks must handle.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface ReceivedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

export type ReceiverMode =
  { kind: 'ok' } | { kind: 'status'; status: number; retryAfter?: string; body?: string } | { kind: 'hang' };

export interface Receiver {
  url: string;
  mode: ReceiverMode;
  /** Every request, in arrival order, accepted or not. */
  readonly requests: ReceivedRequest[];
  /** Keys accepted, de-duplicated, in arrival order. */
  readonly keys: string[];
  /** How many TCP connections were opened to it. */
  connections(): number;
  close(): Promise<void>;
}

export async function startReceiver(secret?: string): Promise<Receiver> {
  const requests: ReceivedRequest[] = [];
  const keys: string[] = [];
  const seen = new Set<string>();
  const sockets = new Set<Socket>();
  let connections = 0;
  const receiver: Receiver = {
    url: '',
    mode: { kind: 'ok' },
    requests,
    keys,
    connections: () => connections,
    close: () => closeServer(server, sockets),
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      const mode = receiver.mode;
      if (mode.kind === 'hang') return;
      if (mode.kind === 'status') {
        const headers: Record<string, string> = { 'content-type': 'text/plain' };
        if (mode.retryAfter !== undefined) headers['retry-after'] = mode.retryAfter;
        res.writeHead(mode.status, headers).end(mode.body ?? `refused with ${mode.status}\n`);
        return;
      }
      if (
        secret !== undefined &&
        (!signatureValid(secret, body, req.headers['x-feedsync-signature']) ||
          !standardSignatureValid(secret, body, req.headers))
      ) {
        res.writeHead(401).end('bad signature\n');
        return;
      }
      const key = req.headers['x-feedsync-key'];
      let parsed: { key?: unknown };
      try {
        parsed = JSON.parse(body.toString('utf8')) as { key?: unknown };
      } catch {
        res.writeHead(400).end('not JSON\n');
        return;
      }
      if (typeof key !== 'string' || parsed.key !== key) {
        res.writeHead(400).end('X-Feedsync-Key missing or not the body key\n');
        return;
      }
      if (!seen.has(key)) {
        seen.add(key);
        keys.push(key);
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
    });
  });
  server.on('connection', (socket: Socket) => {
    connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  receiver.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks/feedsync`;
  return receiver;
}

export function signatureValid(secret: string, body: Buffer, header: string | string[] | undefined): boolean {
  if (typeof header !== 'string' || !header.startsWith('sha256=')) return false;
  const expected = Buffer.from(createHmac('sha256', secret).update(body).digest('hex'));
  const given = Buffer.from(header.slice('sha256='.length));
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/** The Standard Webhooks signature (docs/webhook-signatures.md), for a secret without whsec_. */
export function standardSignatureValid(secret: string, body: Buffer, headers: IncomingHttpHeaders): boolean {
  const { 'webhook-id': id, 'webhook-timestamp': timestamp, 'webhook-signature': signature } = headers;
  if (typeof id !== 'string' || typeof timestamp !== 'string' || typeof signature !== 'string') return false;
  if (Math.abs(Date.now() / 1000 - Number(timestamp)) > 300) return false;
  const expected = Buffer.from(
    `v1,${createHmac('sha256', secret).update(`${id}.${timestamp}.`).update(body).digest('base64')}`,
  );
  const given = Buffer.from(signature);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

async function closeServer(server: Server, sockets: Set<Socket>): Promise<void> {
  for (const socket of sockets) socket.destroy();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}
