// The operations HTTP server: /metrics, /healthz, /readyz. Plain node:http: three read-only
// routes do not justify a framework.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import type { Registry } from 'prom-client';
import { errorMessage } from '../core/errors.js';
import type { Liveness, Readiness } from './health.js';
import { listen } from './listen.js';
import type { Logger } from './logger.js';

// Required, not imported: an ES import of node:http evaluates every export, among them the lazy
// WebSocket getters that load Node's bundled undici (~15 ms of start-up that nothing here uses).
const { createServer } = createRequire(import.meta.url)('node:http') as typeof import('node:http');

export interface HttpServerOptions {
  host: string;
  /** 0 = any free port (tests). */
  port: number;
  registry: Registry;
  readiness: Pick<Readiness, 'status'>;
  liveness: Pick<Liveness, 'alive'>;
  logger: Logger;
}

export interface RunningHttpServer {
  port: number;
  /** Idempotent. */
  close(): Promise<void>;
}

type Route = (res: ServerResponse) => Promise<void>;

export async function startHttpServer(opts: HttpServerOptions): Promise<RunningHttpServer> {
  const routes: Record<string, Route> = {
    '/metrics': async (res) => {
      const body = await opts.registry.metrics();
      send(res, 200, opts.registry.contentType, body);
    },
    '/healthz': async (res) => {
      const alive = opts.liveness.alive();
      sendJson(res, alive ? 200 : 503, { status: alive ? 'ok' : 'event loop unresponsive' });
    },
    '/readyz': async (res) => {
      const { ready, reasons } = await opts.readiness.status();
      sendJson(res, ready ? 200 : 503, ready ? { ready } : { ready, reasons });
    },
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      opts.logger.error({ err: errorMessage(err), path: pathOf(req) }, 'operations endpoint failed');
      if (!res.headersSent) sendJson(res, 500, { error: 'internal error' });
      else res.destroy();
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const route = routes[pathOf(req)];
    if (!route) return sendJson(res, 404, { error: 'not found' });
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('Allow', 'GET, HEAD');
      return sendJson(res, 405, { error: 'method not allowed' });
    }
    await route(res);
  }

  const listening = await listen(server, opts.host, opts.port);
  const { port } = listening;
  opts.logger.debug({ host: opts.host, port }, 'operations HTTP server listening');
  return listening;
}

function pathOf(req: IncomingMessage): string {
  const url = req.url ?? '/';
  const q = url.indexOf('?');
  return q === -1 ? url : url.slice(0, q);
}

function send(res: ServerResponse, status: number, contentType: string, body: string): void {
  res.writeHead(status, { 'Content-Type': contentType, 'Cache-Control': 'no-store' });
  // HEAD gets the headers only; node drops the body for HEAD requests itself.
  res.end(body);
}

function sendJson(res: ServerResponse, status: number, value: unknown): void {
  send(res, status, 'application/json; charset=utf-8', JSON.stringify(value));
}
