// Answers every request under one service's base: digest authentication first, then routing to the
// root, the feed, one event or a subject, with faults injected after authentication succeeded.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Dialect } from './dialect.js';
import type { DigestGuard } from './digest-auth.js';
import type { FaultInjector } from './faults.js';
import { negotiate, renderResource, send, textBody, type Body } from './http-io.js';
import { FeedParamError, type ServiceSim } from './service-sim.js';
import type { StatsRecorder } from './stats.js';
import type { RequestKind } from './types.js';

export interface ServiceHandlerDeps {
  sim: ServiceSim;
  guard: DigestGuard;
  faults: FaultInjector;
  stats: StatsRecorder;
  latencyMs: () => number;
  dialect: () => Dialect;
}

export class ServiceHandler {
  constructor(private readonly deps: ServiceHandlerDeps) {}

  /** `subUrl` is the request URL with the service prefix (`/scheduling`) removed. */
  async handle(req: IncomingMessage, res: ServerResponse, subUrl: string): Promise<void> {
    const { sim, guard, faults, stats } = this.deps;
    const service = sim.service;
    const latency = this.deps.latencyMs();
    if (latency > 0) await new Promise((resolve) => setTimeout(resolve, latency));
    if (res.destroyed) return;

    const verdict = guard.verify(req.method ?? 'GET', req.url ?? '', req.headers.authorization);
    if (!verdict.ok) {
      stats.unauthorized(service);
      this.reply(
        req,
        res,
        textBody(401, 'Unauthorized', { 'www-authenticate': guard.challenge(verdict.stale) }),
      );
      return;
    }

    const url = new URL(subUrl, 'http://sandbox.invalid');
    const kind = sim.classify(url.pathname);
    stats.request(service, kind);
    const real = this.answer(req, url, kind);
    if (verdict.nextnonce) real.headers['authentication-info'] = `nextnonce="${verdict.nextnonce}"`;
    const fault = faults.pick(kind);
    if (fault) {
      stats.fault(service, fault);
      const status = faults.write(fault, res, real);
      if (status !== undefined) stats.status(service, status);
      return;
    }
    if (kind === 'subject' && real.status === 404) stats.subjectNotFound(service);
    this.reply(req, res, real);
  }

  private answer(req: IncomingMessage, url: URL, kind: RequestKind): Body {
    const { sim } = this.deps;
    if (req.method !== 'GET')
      return textBody(405, `${req.method} is not supported by the sandbox`, { allow: 'GET' });
    const format = negotiate(req);
    const dialect = this.deps.dialect();
    const render = (r: Parameters<typeof renderResource>[0]) =>
      renderResource(r, format, sim.xmlOptions, dialect);
    switch (kind) {
      case 'root':
        return render(sim.root());
      case 'feed':
        try {
          return render(sim.feed(url.searchParams));
        } catch (err) {
          if (err instanceof FeedParamError) return textBody(400, err.message);
          throw err;
        }
      case 'event': {
        const ev = sim.event(url.pathname.slice('/api/events/'.length), url.searchParams);
        return ev ? render(ev) : textBody(404, '');
      }
      default: {
        const res = sim.resource(url.pathname);
        return res ? render(res) : textBody(404, '');
      }
    }
  }

  private reply(req: IncomingMessage, res: ServerResponse, body: Body): void {
    this.deps.stats.status(this.deps.sim.service, body.status);
    const { compression, transfer } = this.deps.dialect();
    send(res, body, { acceptEncoding: req.headers['accept-encoding'], compression, transfer });
  }
}
