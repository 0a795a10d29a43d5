// Composition root: sinks → queue driver → delivery → pollers, plus metrics and health. Each
// acquired piece registers its releaser; stop() releases in reverse order within the budget.
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { backoffDelay, sleep } from './backoff.js';
import type { FeedsyncConfig } from './config/types.js';
import { ConfigError, errorMessage } from './core/errors.js';
import { PipelineEvents } from './core/events.js';
import { createLiveness, createReadiness, type ReadinessCheck } from './observability/health.js';
import { createMetrics } from './observability/metrics.js';
import { readSinkPositions, sinkPositionPairs } from './observability/sink-positions-view.js';
import { startHttpServer } from './observability/server.js';
import { runPoller } from './pipeline/poller.js';
import {
  modeDelivers,
  modePolls,
  type DriverContext,
  type HeldLease,
  type QueueDriver,
} from './queue/driver.js';
import { openQueueDriver } from './queue/drivers.js';
import type { QueueAdmin, SinkRuntime } from './queue/queue.js';
import { Releasers } from './releasers.js';
import { services } from './services/index.js';
import { withDeliveryDeadline } from './sinks/deadline.js';
import { withProbeGate } from './sinks/probe-gate.js';
import { openSink } from './sinks/registry.js';
import { createUpstreamClient, sourceClientOptions, type UpstreamClient } from './upstream/client.js';

export type DaemonMode = 'run' | 'poll' | 'work';

export interface DaemonOptions {
  config: FeedsyncConfig;
  configDir: string;
  mode: DaemonMode;
  logger: Logger;
  version: string;
  /** Shared with the caller (the demo's progress line subscribes to it). */
  events?: PipelineEvents;
  /** Aborted by a shutdown signal: a start still waiting for its queue gives up (StartAborted). */
  signal?: AbortSignal;
}

/** startDaemon gave up because it was asked to stop before its queue opened: not a failure. */
export class StartAborted extends Error {
  override name = 'StartAborted';
}

export interface Daemon {
  events: PipelineEvents;
  metricsPort: number;
  /** The admin listener's port, when `admin.enabled`. */
  adminPort?: number;
  admin: QueueAdmin;
  /** Graceful: stop polling, finish or hand back in-flight work, persist, close. Idempotent. */
  stop(): Promise<void>;
  /** Resolves with the reason if the daemon must stop on its own (it lost what it owned); the caller stops it and exits non-zero. */
  failed: Promise<Error>;
}

export async function startDaemon(opts: DaemonOptions): Promise<Daemon> {
  const { config, logger, mode } = opts;
  const polls = modePolls(mode);
  const events = opts.events ?? new PipelineEvents();
  const release = new Releasers();
  const stopPolling = new AbortController();
  const pollers: Promise<void>[] = [];
  const sinkNames = config.sinks.map((s) => s.name);
  // Sources whose lease this process holds right now (feedsync_source_leader).
  const leading = new Set<string>();

  try {
    const sinks = modeDelivers(mode) ? await openSinks(opts, events, release) : [];
    // The HTTP server listens before anything waits on Redis, so a queue that cannot be opened is a
    // state /readyz names (and the liveness probe does not mistake for a hang), not a silent start.
    let driver: QueueDriver | undefined = undefined;
    let notOpen = `starting: opening the ${config.queue.driver} queue`;
    const checks: Record<string, ReadinessCheck> = {
      queue: () => {
        if (driver) return true;
        throw new Error(notOpen);
      },
    };

    const metrics = createMetrics({
      events,
      sources: polls ? config.sources.map((s) => s.name) : [],
      sinks: sinkNames,
      version: opts.version,
      queueCounts: () => (driver ? driver.admin.counts() : Promise.reject(new Error(notOpen))),
      leading: () => [...leading],
      sinkHealth: () => sinkHealth(sinks),
      // Every mode: the positions live in the store or Redis, not in this process.
      sinkPositions: async (counts) => {
        const parts = driver?.sourceState && {
          sourceState: driver.sourceState,
          admin: driver.admin,
          positions: driver.positions,
        };
        return parts ? (await readSinkPositions(config, parts, { counts })).views : [];
      },
      sinkPairs: sinkPositionPairs(config),
      redis: config.queue.driver === 'bullmq',
      logger,
    });
    release.add('metrics', () => metrics.close());
    const readiness = createReadiness({
      events,
      sources: polls ? config.sources.map((s) => ({ name: s.name, pollIntervalMs: s.poll_interval_ms })) : [],
      checks,
    });
    const liveness = createLiveness();
    release.add('liveness', () => liveness.close?.());
    const server = await startHttpServer({
      host: config.http.host,
      port: config.http.port,
      registry: metrics.registry,
      readiness,
      liveness,
      logger,
    });
    release.add('http server', () => server.close());

    // Lazily, and only when enabled: a daemon without the admin listener loads none of it. Its
    // tokens are read before the queue opens, so a missing token file fails the start at once.
    const admin = config.admin.enabled ? await prepareAdmin(opts) : undefined;

    const opened = await openDriverPatiently(
      { config, mode, sinks, events, logger },
      opts.signal,
      (problem) => (notOpen = problem),
      logger,
    );
    driver = opened;
    release.add('queue driver', () => opened.close());
    delete checks.queue;
    Object.assign(checks, opened.checks);
    const { delivery } = opened;
    const adminServer = admin && (await admin.start(opened, metrics.registry, events));
    if (adminServer) release.add('admin server', () => adminServer.close());

    if (delivery) {
      // Registered after the sinks, so released before them: deliveries end, then sinks close.
      // Before start(), which waits for Redis: a stop meanwhile stops what it started.
      release.add('delivery', () => delivery.stop(config.shutdown_timeout_ms));
      await untilAborted(delivery.start(), opts.signal);
    }

    if (polls)
      pollers.push(
        ...startPollers(opts, pollingParts(opened, mode), events, release, stopPolling.signal, leading),
      );
    // Pollers stop first: nothing new is queued while deliveries drain.
    release.add('pollers', async () => {
      stopPolling.abort();
      await Promise.all(pollers);
    });

    logger.info(
      {
        mode,
        driver: config.queue.driver,
        sources: polls ? config.sources.map((s) => s.name) : [],
        sinks: sinkNames,
        metrics_port: server.port,
        ...(adminServer && { admin_port: adminServer.port }),
      },
      'feedsync started',
    );
    let stopped: Promise<void> | undefined;
    const failed = new Promise<Error>((resolve) => {
      const fatal = opened.fatal;
      if (!fatal) return;
      const report = () => {
        const reason = fatal.reason instanceof Error ? fatal.reason : new Error(String(fatal.reason));
        logger.error({ err: reason.message }, 'stopping: this process no longer owns the store');
        resolve(reason);
      };
      if (fatal.aborted) report();
      else fatal.addEventListener('abort', report, { once: true });
    });
    return {
      events,
      metricsPort: server.port,
      adminPort: adminServer?.port,
      admin: opened.admin,
      failed,
      stop: () =>
        (stopped ??= release.close().then((errors) => {
          for (const e of errors) logger.error({ err: e.message }, 'error while stopping');
          logger.info('feedsync stopped');
        })),
    };
  } catch (err) {
    stopPolling.abort();
    await release.close();
    throw err;
  }
}

/**
 * Reads the admin tokens (ConfigError naming the key) and returns what starts the admin listener
 * once the queue is open. It works on this process's driver where that has every part the
 * commands need (`run`, `poll`); a `work` replica opens the ops parts for it, as the CLI does.
 */
async function prepareAdmin(opts: DaemonOptions) {
  const { config, logger } = opts;
  const [{ readAdminTokens }, { startAdminServer }, { watchActivity }, { openOps }] = await Promise.all([
    import('./admin/tokens.js'),
    import('./admin/server.js'),
    import('./admin/activity.js'),
    import('./commands/admin.js'),
  ]);
  const tokens = readAdminTokens(config.admin, opts.configDir);
  return {
    async start(driver: QueueDriver, registry: Registry, events: PipelineEvents) {
      const { sourceState, leases, admin, positions } = driver;
      let own: ReturnType<typeof openOps> | undefined;
      const ops =
        sourceState && leases
          ? () => Promise.resolve({ sourceState, leases, admin, positions })
          : () =>
              (own ??= openOps(config).catch((err: unknown) => {
                own = undefined; // the next request tries again (Redis back, say)
                throw err;
              }));
      const activity = modeDelivers(opts.mode)
        ? watchActivity(
            events,
            config.sinks.map((s) => s.name),
          )
        : undefined;
      const server = await startAdminServer({
        config,
        ops,
        activity,
        host: config.admin.host,
        port: config.admin.port,
        tokens,
        registry,
        logger,
      });
      return {
        port: server.port,
        async close() {
          activity?.close();
          await server.close();
          await (await own?.catch(() => undefined))?.close();
        },
      };
    },
  };
}

/**
 * Opens the queue driver; with Redis, keeps trying while Redis is unreachable, misconfigured or
 * refusing (each failure names its cause and the key to fix, in the log and through `report` in
 * /readyz), since a Secret fixed or a Redis started later must not need a restart. The local
 * store's failures (a path that cannot be opened) still fail the start: only the operator fixes them.
 */
async function openDriverPatiently(
  ctx: DriverContext,
  signal: AbortSignal | undefined,
  report: (problem: string) => void,
  logger: Logger,
): Promise<QueueDriver> {
  for (let attempt = 0; ; attempt++) {
    if (signal?.aborted) throw new StartAborted('stopped before the queue opened');
    const opening = openQueueDriver(ctx);
    try {
      return await untilAborted(opening, signal);
    } catch (err) {
      if (signal?.aborted) {
        // The attempt may still open later: close what it opens.
        opening
          .then(
            (d) => d.close(),
            () => undefined,
          )
          .catch(() => undefined);
        throw new StartAborted('stopped before the queue opened');
      }
      // A setting that is wrong in itself (a ca_file holding no certificate) is not fixed by waiting.
      if (ctx.config.queue.driver !== 'bullmq' || err instanceof ConfigError) throw err;
      const retryInMs = Math.max(1000, backoffDelay(attempt, 2000, 30_000));
      const problem = errorMessage(err);
      report(`the queue is not open: ${problem}`);
      logger.error(
        { err: problem, attempt: attempt + 1, retry_in_ms: retryInMs },
        'cannot open the queue; retrying',
      );
      if (!(await sleep(retryInMs, signal))) throw new StartAborted('stopped before the queue opened');
    }
  }
}

function untilAborted<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new StartAborted('stopped before the queue opened'));
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** Each sink's own `healthy()`, bounded in time: a sink without one, or that throws, is judged by that. */
async function sinkHealth(sinks: SinkRuntime[]): Promise<Record<string, boolean>> {
  const entries = await Promise.all(
    sinks.map(async ({ name, sink }): Promise<[string, boolean]> => {
      if (!sink.healthy) return [name, true];
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), 1000);
        timer.unref();
      });
      try {
        return [name, await Promise.race([sink.healthy().then((ok) => ok !== false), late])];
      } catch {
        return [name, false];
      } finally {
        clearTimeout(timer);
      }
    }),
  );
  return Object.fromEntries(entries);
}

/**
 * Open every configured sink, each registering its close. The probe gate is outside the deadline,
 * so a sink that hangs is also probed one call at a time.
 */
async function openSinks(
  opts: DaemonOptions,
  events: PipelineEvents,
  release: Releasers,
): Promise<SinkRuntime[]> {
  const runtimes: SinkRuntime[] = [];
  for (const sinkConfig of opts.config.sinks) {
    const logger = opts.logger.child({ sink: sinkConfig.name });
    const opened = await openSink(sinkConfig, {
      name: sinkConfig.name,
      logger,
      configDir: opts.configDir,
    });
    const sink = withProbeGate(
      withDeliveryDeadline(opened, sinkConfig.name, opts.config.queue.delivery_timeout_ms, logger),
      sinkConfig.name,
      opts.config.queue,
      // Its lines name the sink themselves.
      { logger: opts.logger, events },
    );
    runtimes.push({ name: sinkConfig.name, sink, state: sink.state, readyInMs: sink.readyInMs });
    release.add(`sink ${sinkConfig.name}`, () => sink.close());
  }
  return runtimes;
}

/** A driver opened for a polling mode must supply all three; anything else is a driver bug. */
function pollingParts(driver: QueueDriver, mode: DaemonMode) {
  const { producer, sourceState, leases } = driver;
  if (!producer || !sourceState || !leases)
    throw new Error(`queue driver opened for "${mode}" lacks its producer, source state or leases`);
  return { producer, sourceState, leases };
}

/** One poller per source, each polling only while it holds the source's lease; clients register their close. */
function startPollers(
  opts: DaemonOptions,
  parts: ReturnType<typeof pollingParts>,
  events: PipelineEvents,
  release: Releasers,
  stop: AbortSignal,
  leading: Set<string>,
): Promise<void>[] {
  const { config, logger } = opts;
  const { producer, sourceState, leases } = parts;
  const sinkFilters = new Map(config.sinks.map((s) => [s.name, s.filter]));
  return config.sources.map((source) => {
    const adapter = services[source.service];
    const log = logger.child({ source: source.name });
    const client: UpstreamClient = createUpstreamClient({
      ...sourceClientOptions(source),
      connections: Math.max(2, source.subject_concurrency + 1),
      events,
      logger: log,
      linkRel: adapter.linkRel,
    });
    release.add(`client ${source.name}`, () => client.close());
    const acquire = (signal: AbortSignal): Promise<HeldLease | undefined> =>
      // Info, not a warning: with standby pollers (scaled mode) waiting is the normal state.
      leases.acquire(source.name, signal, (holder) =>
        log.info({ holder }, `waiting for source ${source.name} held by ${holder}`),
      );
    return pollWhileLeased(source.name, leading, acquire, stop, log, (signal) =>
      runPoller({
        source,
        adapter,
        client,
        queue: producer,
        sourceState,
        events,
        logger: log,
        signal,
        sinkFilters,
      }),
    );
  });
}

/** Hold the source's lease while polling; if the lease is lost, stop and wait to win it back. */
async function pollWhileLeased(
  source: string,
  leading: Set<string>,
  acquire: (signal: AbortSignal) => Promise<HeldLease | undefined>,
  stop: AbortSignal,
  logger: Logger,
  poll: (signal: AbortSignal) => Promise<void>,
): Promise<void> {
  while (!stop.aborted) {
    let lock: HeldLease | undefined;
    try {
      lock = await acquire(stop);
    } catch (err) {
      logger.error({ err: errorMessage(err) }, 'cannot take the source lease; retrying');
      await new Promise((r) => setTimeout(r, 1000));
      continue;
    }
    if (!lock) return;
    leading.add(source);
    const lost = (): boolean => leading.delete(source);
    lock.lost.addEventListener('abort', lost, { once: true });
    try {
      await poll(AbortSignal.any([stop, lock.lost]));
      if (lock.lost.aborted && !stop.aborted)
        logger.error('lost the source lease to another process; polling stopped until it is free again');
    } finally {
      lost();
      await lock.release().catch(() => undefined);
    }
  }
}
