// The sandbox's control API under /_control (no auth, loopback only): the JS API over HTTP, so that
// black-box tests and scripts can steer a sandbox running in another process.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ConfigError, errorMessage } from '../core/errors.js';
import type { Dialect, DialectSpec } from './dialect.js';
import { readBody, sendJson } from './http-io.js';
import {
  SERVICE_NAMES,
  type FaultKind,
  type FaultPaths,
  type SandboxStats,
  type ServiceName,
} from './types.js';
import type { SandboxEvent } from './types.js';
import type { Resource } from '../core/resource.js';

/** The part of the Sandbox the control API drives. */
export interface Controllable {
  stats(): SandboxStats;
  resetStats(): void;
  setFaults(cfg: { rate: number; kinds?: FaultKind[]; paths?: FaultPaths }): void;
  faults(): { rate: number; kinds: FaultKind[]; paths: FaultPaths };
  setRate(eventsPerSecond: number): void;
  generate(service: ServiceName, count: number): void;
  events(service: ServiceName): SandboxEvent[];
  liveState(service: ServiceName): Record<string, Resource>;
  dialect(): Dialect;
  setDialect(spec: DialectSpec): void;
}

export async function handleControl(
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  sandbox: Controllable,
): Promise<void> {
  const method = req.method ?? 'GET';
  try {
    const route = `${method} ${path.replace(/\/+$/, '')}`;
    const service = /^GET \/_control\/(events|live)\/([^/]+)$/.exec(route);
    if (service) {
      const name = serviceName(decodeURIComponent(service[2] as string));
      sendJson(res, 200, service[1] === 'events' ? sandbox.events(name) : sandbox.liveState(name));
      return;
    }
    switch (route) {
      case 'GET /_control/stats':
        return sendJson(res, 200, sandbox.stats());
      case 'POST /_control/stats/reset':
        sandbox.resetStats();
        return sendJson(res, 200, sandbox.stats());
      case 'GET /_control/faults':
        return sendJson(res, 200, sandbox.faults());
      case 'POST /_control/faults':
        sandbox.setFaults((await jsonBody(req)) as { rate: number });
        return sendJson(res, 200, sandbox.faults());
      case 'GET /_control/dialect':
        return sendJson(res, 200, sandbox.dialect());
      case 'POST /_control/dialect':
        // {"profile": "rails", "xmlQuote": "single", …}: a profile plus switches, all checked.
        sandbox.setDialect((await jsonBody(req)) as DialectSpec);
        return sendJson(res, 200, sandbox.dialect());
      case 'POST /_control/rate': {
        const body = (await jsonBody(req)) as { events_per_s?: unknown };
        sandbox.setRate(body.events_per_s as number);
        return sendJson(res, 200, { events_per_s: body.events_per_s });
      }
      case 'POST /_control/generate': {
        const body = (await jsonBody(req)) as { service?: unknown; count?: unknown };
        const name = serviceName(body.service);
        sandbox.generate(name, body.count as number);
        const events = sandbox.events(name);
        return sendJson(res, 200, {
          service: name,
          count: body.count,
          last_event_id: events.at(-1)?.id ?? null,
        });
      }
      default:
        return sendJson(res, 404, { error: `no control endpoint ${method} ${path}` });
    }
  } catch (err) {
    sendJson(res, err instanceof ConfigError ? 400 : 500, { error: errorMessage(err) });
  }
}

function serviceName(value: unknown): ServiceName {
  if (!SERVICE_NAMES.includes(value as ServiceName)) {
    throw new ConfigError('service', `must be "scheduling" or "workflow", got ${JSON.stringify(value)}`);
  }
  return value as ServiceName;
}

async function jsonBody(req: IncomingMessage): Promise<object> {
  const text = await readBody(req);
  try {
    const value: unknown = JSON.parse(text === '' ? '{}' : text);
    if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error('not an object');
    return value;
  } catch (err) {
    throw new ConfigError('body', `must be a JSON object (${errorMessage(err)})`);
  }
}
