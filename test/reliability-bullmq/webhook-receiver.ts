// A real webhook receiver on 127.0.0.1:0 for the dead-letter suites. It checks every request's
// X-Feedsync-Signature against the shared secret, records X-Feedsync-Key, and answers per a policy
// the test can change while feedsync runs (503 for some attempts, 400 for chosen keys).
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ReceivedRequest {
  key: string;
  /** Date.now() when it arrived. */
  at: number;
  status: number;
  /** The body's `key` field, to check it matches the header. */
  bodyKey: string | undefined;
}

export type Policy = (key: string, attempt: number) => number;

export interface WebhookReceiver {
  url: string;
  requests: ReceivedRequest[];
  /** Requests whose signature was missing or wrong (should stay empty). */
  badSignatures: string[];
  /** Keys answered 2xx at least once (kept as requests arrive: checks poll it often, and rebuilding
   * it per call once cost seconds of this process's loop, long enough to time the sender out). */
  accepted(): ReadonlySet<string>;
  attempts(key: string): number;
  setPolicy(policy: Policy): void;
  close(): Promise<void>;
}

export async function startReceiver(
  secret: string,
  policy: Policy,
  opts: { retryAfter?: string } = {},
): Promise<WebhookReceiver> {
  const requests: ReceivedRequest[] = [];
  const badSignatures: string[] = [];
  const attemptsByKey = new Map<string, number>();
  const accepted = new Set<string>();
  let current = policy;
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const key = String(req.headers['x-feedsync-key'] ?? '');
      const expected = Buffer.from(
        'sha256=' + createHmac('sha256', secret).update(body).digest('hex'),
        'utf8',
      );
      const given = Buffer.from(String(req.headers['x-feedsync-signature'] ?? ''), 'utf8');
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
        badSignatures.push(key);
        res.writeHead(401).end('bad signature');
        return;
      }
      let bodyKey: string | undefined;
      try {
        bodyKey = (JSON.parse(body.toString('utf8')) as { key?: string }).key;
      } catch {
        bodyKey = undefined;
      }
      const attempt = (attemptsByKey.get(key) ?? 0) + 1;
      attemptsByKey.set(key, attempt);
      const status = current(key, attempt);
      requests.push({ key, status, bodyKey, at: Date.now() });
      if (status < 300) accepted.add(key);
      const headers: Record<string, string> = { 'content-type': 'text/plain' };
      if (status === 503 && opts.retryAfter !== undefined) headers['retry-after'] = opts.retryAfter;
      res.writeHead(status, headers).end(status < 300 ? 'ok' : `refused ${key}`);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/hooks/feedsync`,
    requests,
    badSignatures,
    accepted: () => accepted,
    attempts: (key) => attemptsByKey.get(key) ?? 0,
    setPolicy(policy) {
      current = policy;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
