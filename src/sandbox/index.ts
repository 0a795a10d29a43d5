// The sandbox: one node:http server on 127.0.0.1 simulating both upstream services (under
// /scheduling and /workflow, Digest auth on everything) plus an unauthenticated control API.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ConfigError } from '../core/errors.js';
import { handleControl, type Controllable } from './control-api.js';
import { resolveDialect, type Dialect, type DialectSpec } from './dialect.js';
import { DigestGuard } from './digest-auth.js';
import { closeIdleConnections } from './idle-close.js';
import { FaultInjector } from './faults.js';
import { sendJson, send, textBody } from './http-io.js';
import { deriveSeed, Rng } from './prng.js';
import { ServiceHandler } from './service-handler.js';
import { ServiceSim } from './service-sim.js';
import { StatsRecorder } from './stats.js';
import {
  checkFaultConfig,
  resolveOptions,
  SERVICE_NAMES,
  type FaultKind,
  type FaultPaths,
  type SandboxEvent,
  type SandboxOptions,
  type SandboxStats,
  type ServiceName,
  withNonceTtl,
} from './types.js';
import type { Resource } from '../core/resource.js';

export type {
  DigestAlgorithm,
  FaultConfig,
  FaultKind,
  FaultPaths,
  RequestKind,
  SandboxEvent,
  SandboxOptions,
  SandboxStats,
  ServiceName,
  ServiceStats,
} from './types.js';
export { FAULT_KINDS } from './types.js';
export type { Dialect, DialectName, DialectSpec } from './dialect.js';
export { DIALECT_NAMES, DIALECT_PROFILES, resolveDialect } from './dialect.js';

export interface SandboxReadyLine {
  scheduling_base_url: string;
  workflow_base_url: string;
  username: string;
  password: string;
  control_url: string;
}

export interface Sandbox extends Controllable {
  schedulingBaseUrl: string;
  workflowBaseUrl: string;
  controlUrl: string;
  username: string;
  password: string;
  port: number;
  /** The JSON line `feedsync sandbox` prints (the keys README "The sandbox" lists). */
  readyLine(): SandboxReadyLine;
  /** Appends `count` events to a service now (timestamps: the current time). */
  generate(service: ServiceName, count: number): void;
  /** Live events per second per service; 0 stops them. */
  setRate(eventsPerSecond: number): void;
  /** The delay before every answer from now on (the `latencyMs` option). */
  setLatency(ms: number): void;
  setFaults(cfg: { rate: number; kinds?: FaultKind[]; paths?: FaultPaths }): void;
  stats(): SandboxStats;
  resetStats(): void;
  /** Every event the service ever produced, in id order. */
  events(service: ServiceName): SandboxEvent[];
  /** Every live subject by URL, exactly as a GET of it returns it as JSON. */
  liveState(service: ServiceName): Record<string, Resource>;
  /** The forms the services answer in now. */
  dialect(): Dialect;
  /** Switches every form the services answer in, from the next request on. */
  setDialect(spec: DialectSpec): void;
  /** Stops the server and the live generator, ends hanging requests. Idempotent. */
  close(): Promise<void>;
}

const LIVE_TICK_MS = 100;
/** Backlogs start on a fixed date so that a seed gives the same timestamps on every run. */
const BACKLOG_EPOCH_MS = Date.UTC(2026, 0, 1);

export async function startSandbox(options: SandboxOptions = {}): Promise<Sandbox> {
  const opts = resolveOptions(options);
  const stats = new StatsRecorder();
  const faults = new FaultInjector(new Rng(deriveSeed(opts.seed, 2)), {
    rate: opts.faultRate,
    kinds: opts.faultKinds,
    paths: opts.faultPaths,
  });
  // Filled once the port is known (base URLs embed it); requests before that get 503.
  let dialect: Dialect = opts.dialect;
  const ready: { handlers?: Record<ServiceName, ServiceHandler>; sandbox?: Sandbox } = {};

  const server = createServer((req, res) => {
    route(req, res).catch((err: unknown) => {
      // A bug in the sandbox must not take the process down; answer 500 and carry on.
      process.stderr.write(`sandbox: error answering ${req.method} ${req.url}: ${String(err)}\n`);
      send(res, textBody(500, 'sandbox internal error'));
    });
  });
  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = req.url ?? '/';
    const { handlers, sandbox } = ready;
    if (!handlers || !sandbox) return send(res, textBody(503, 'sandbox starting'));
    const path = url.split('?')[0] as string;
    if (path === '/_control' || path.startsWith('/_control/')) return handleControl(req, res, path, sandbox);
    for (const service of SERVICE_NAMES) {
      const prefix = `/${service}`;
      if (path === prefix || path.startsWith(`${prefix}/`)) {
        return handlers[service].handle(req, res, url.slice(prefix.length) || '/');
      }
    }
    sendJson(res, 404, { error: `nothing at ${path}; the services are under /scheduling and /workflow` });
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', (err) =>
      reject(new ConfigError('port', `cannot listen on 127.0.0.1:${opts.port}: ${err.message}`)),
    );
    server.listen(opts.port, '127.0.0.1', () => resolve());
  });
  closeIdleConnections(server, () => dialect.idleCloseMs);
  const port = (server.address() as AddressInfo).port;
  const origin = `http://127.0.0.1:${port}`;
  const backlogStartMs = Math.min(
    BACKLOG_EPOCH_MS,
    Math.floor(Date.now() / 1000) * 1000 - opts.backlog * 30_000 - 3_600_000,
  );

  const sims = {} as Record<ServiceName, ServiceSim>;
  const handlers = {} as Record<ServiceName, ServiceHandler>;
  SERVICE_NAMES.forEach((service, i) => {
    const sim = new ServiceSim(service, `${origin}/${service}`, {
      seed: deriveSeed(opts.seed, i),
      disorder: service === 'workflow' ? opts.workflowDisorder : 0,
      backlogStartMs,
      firstEventId: dialect.eventIds === 'large' ? 2 ** 31 + 1000 : 1000,
      dialect: () => dialect,
    });
    sim.backlog(opts.backlog);
    sims[service] = sim;
    const only = opts.digestAlgorithms[service];
    const guard = new DigestGuard({
      realm: `feedsync-sandbox-${service}`,
      domain: `/${service}/`,
      username: opts.username,
      password: opts.password,
      settings: () => (only ? { ...dialect, digestAlgorithms: [only] } : dialect),
    });
    handlers[service] = new ServiceHandler({
      sim,
      guard,
      faults,
      stats,
      latencyMs: () => latencyMs,
      dialect: () => dialect,
    });
  });

  let rate = opts.rate;
  let latencyMs = opts.latencyMs;
  const owed: Record<ServiceName, number> = { scheduling: 0, workflow: 0 };
  let lastTick = Date.now();
  const ticker = setInterval(() => {
    const now = Date.now();
    const elapsed = (now - lastTick) / 1000;
    lastTick = now;
    if (rate <= 0) return;
    for (const service of SERVICE_NAMES) {
      owed[service] += rate * elapsed;
      const n = Math.floor(owed[service]);
      owed[service] -= n;
      if (n > 0) sims[service].generateNow(n);
    }
  }, LIVE_TICK_MS);
  ticker.unref();

  let closing: Promise<void> | undefined;
  const checkService = (service: unknown): ServiceName => {
    if (!SERVICE_NAMES.includes(service as ServiceName)) {
      throw new ConfigError('service', `must be "scheduling" or "workflow", got ${JSON.stringify(service)}`);
    }
    return service as ServiceName;
  };

  const sandbox: Sandbox = {
    schedulingBaseUrl: `${origin}/scheduling`,
    workflowBaseUrl: `${origin}/workflow`,
    controlUrl: `${origin}/_control`,
    username: opts.username,
    password: opts.password,
    port,
    readyLine: () => ({
      scheduling_base_url: `${origin}/scheduling`,
      workflow_base_url: `${origin}/workflow`,
      username: opts.username,
      password: opts.password,
      control_url: `${origin}/_control`,
    }),
    generate(service, count) {
      if (!Number.isInteger(count) || count < 0 || count > 10_000_000) {
        throw new ConfigError('count', `must be an integer from 0 to 10000000, got ${JSON.stringify(count)}`);
      }
      sims[checkService(service)].generateNow(count);
    },
    setRate(eventsPerSecond) {
      if (typeof eventsPerSecond !== 'number' || !Number.isFinite(eventsPerSecond) || eventsPerSecond < 0) {
        throw new ConfigError(
          'events_per_s',
          `must be a number >= 0, got ${JSON.stringify(eventsPerSecond)}`,
        );
      }
      rate = eventsPerSecond;
    },
    setLatency(ms) {
      if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) {
        throw new ConfigError('latency_ms', `must be a number >= 0, got ${JSON.stringify(ms)}`);
      }
      latencyMs = ms;
    },
    setFaults(cfg) {
      faults.configure(checkFaultConfig(cfg, opts.faultKinds));
    },
    faults: () => faults.config(),
    dialect: () => structuredClone(dialect),
    setDialect(spec) {
      dialect = withNonceTtl(resolveDialect(spec), options.nonceTtlMs);
    },
    stats: () => stats.snapshot(),
    resetStats: () => stats.reset(),
    events: (service) => sims[checkService(service)].events(),
    liveState: (service) => sims[checkService(service)].liveState(),
    close() {
      closing ??= new Promise<void>((resolve) => {
        clearInterval(ticker);
        faults.releaseHanging();
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closing;
    },
  };
  ready.handlers = handlers;
  ready.sandbox = sandbox;
  return sandbox;
}
