// Composition root: store → queue → sinks → delivery → pollers, plus metrics and health. Each
// acquired piece registers its releaser; stop() releases in reverse order within the budget.
import type { Logger } from 'pino';
import type { FeedsyncConfig } from './config/types.js';
import { ConfigError, errorMessage } from './core/errors.js';
import { createLiveness, createReadiness } from './observability/health.js';
import { createMetrics } from './observability/metrics.js';
import { startHttpServer } from './observability/server.js';
import { PipelineEvents } from './core/events.js';
import { runPoller } from './pipeline/poller.js';
import { createLocalQueue } from './queue/local/index.js';

// BullMQ and ioredis weigh ~30 MB: loaded only when queue.driver is bullmq.
const loadBullmq = () => import('./queue/bullmq/driver.js');
import type { SourceLeases, SourceState } from './queue/driver.js';
import type { ChangeQueue, DeliveryRunner, QueueAdmin, SinkRuntime } from './queue/queue.js';
import { Releasers } from './releasers.js';
import { services } from './services/index.js';
import { openSink } from './sinks/registry.js';
import { CursorStore, cursorStoreState } from './store/cursors.js';
import { SqliteSourceLocks, type HeldLock } from './store/source-lock.js';
import { openStore } from './store/store.js';
import { createUpstreamClient, type UpstreamClient } from './upstream/client.js';

export type DaemonMode = 'run' | 'poll' | 'work';

export interface DaemonOptions {
  config: FeedsyncConfig;
  configDir: string;
  mode: DaemonMode;
  logger: Logger;
  version: string;
  /** Shared with the caller (the demo's progress line subscribes to it). */
  events?: PipelineEvents;
}

export interface Daemon {
  events: PipelineEvents;
  metricsPort: number;
  admin: QueueAdmin;
  /** Graceful: stop polling, finish or hand back in-flight work, persist, close. Idempotent. */
  stop(): Promise<void>;
}

export async function startDaemon(opts: DaemonOptions): Promise<Daemon> {
  const { config, logger, mode } = opts;
  const bullmq = config.queue.driver === 'bullmq';
  if (!bullmq && mode !== 'run')
    throw new ConfigError(
      'queue.driver',
      `"feedsync ${mode}" needs queue.driver: bullmq (the local queue lives inside one "feedsync run" process)`,
    );
  const polls = mode !== 'work';
  const delivers = mode !== 'poll';
  const events = opts.events ?? new PipelineEvents();
  const release = new Releasers();
  const stopPolling = new AbortController();
  const pollers: Promise<void>[] = [];
  const sinkSpecs = config.sinks.map((s) => ({ name: s.name, filter: s.filter }));

  try {
    // Scaled mode keeps everything in Redis: only the local queue opens the store.
    const db = !bullmq ? openStore(config.store.path) : undefined;
    if (db) release.add('store', () => db.close());
    const cursors = db ? new CursorStore(db) : undefined;
    let sourceState: SourceState | undefined = cursors ? cursorStoreState(cursors) : undefined;
    let leases: SourceLeases | undefined = db ? localLeases(new SqliteSourceLocks(db)) : undefined;
    let leading: () => string[] = () => [];

    const runtimes: SinkRuntime[] = [];
    if (delivers) {
      for (const sinkConfig of config.sinks) {
        const sink = await openSink(sinkConfig, {
          name: sinkConfig.name,
          logger: logger.child({ sink: sinkConfig.name }),
          configDir: opts.configDir,
        });
        runtimes.push({ name: sinkConfig.name, sink });
        release.add(`sink ${sinkConfig.name}`, () => sink.close());
      }
    }

    let producer: ChangeQueue | undefined;
    let delivery: DeliveryRunner | undefined;
    let admin: QueueAdmin;
    const bull = bullmq ? await loadBullmq() : undefined;
    const checks: Record<string, () => Promise<boolean> | boolean> = {};
    if (bull) {
      const driver = await bull.createBullmqDriver({ config, mode, sinks: runtimes, events, logger });
      release.add('queue driver', () => driver.close());
      admin = driver.admin;
      producer = driver.producer;
      delivery = driver.delivery;
      sourceState = driver.sourceState;
      leases = driver.leases;
      leading = () => driver.leading();
      Object.assign(checks, driver.checks);
    } else {
      const local = createLocalQueue({
        db: db!,
        cursors: cursors!,
        queue: config.queue,
        sinks: sinkSpecs,
        runtimes,
        events,
        logger,
      });
      release.add('local queue', () => local.close());
      producer = local.producer;
      delivery = local.delivery;
      admin = local.admin;
    }

    const metrics = createMetrics({
      events,
      sources: polls ? config.sources.map((s) => s.name) : [],
      sinks: sinkSpecs.map((s) => s.name),
      version: opts.version,
      queueCounts: () => admin.counts(),
      leading: () => leading(),
      logger,
    });
    release.add('metrics', () => metrics.close());
    if (db) checks.store = () => db.open;
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

    if (delivery) {
      const d = delivery;
      await d.start();
      // Registered after the sinks, so released before them: deliveries end, then sinks close.
      release.add('delivery', () => d.stop(config.shutdown_timeout_ms));
    }

    if (polls) {
      const held = new Set<string>();
      if (!bull) leading = () => [...held];
      for (const source of config.sources) {
        const adapter = services[source.service];
        const log = logger.child({ source: source.name });
        const client: UpstreamClient = createUpstreamClient({
          source: source.name,
          username: source.username,
          password: source.password,
          format: source.format,
          timeoutMs: source.timeout_ms,
          connections: Math.max(2, source.subject_concurrency + 1),
          events,
          logger: log,
          linkRel: adapter.linkRel,
        });
        release.add(`client ${source.name}`, () => client.close());
        const acquire = (signal: AbortSignal): Promise<HeldLock | undefined> =>
          leases!.acquire(source.name, signal, (holder) =>
            bull
              ? // Standing by is normal with several poll replicas: info, naming the holder.
                log.info({ holder }, `waiting for source ${source.name} held by ${holder}`)
              : log.warn({ holder }, 'source is polled by another process; waiting for its lock'),
          );
        pollers.push(
          pollWhileLocked(acquire, stopPolling.signal, log, held, source.name, (signal) =>
            runPoller({
              source,
              adapter,
              client,
              queue: producer!,
              cursors: sourceState!,
              events,
              logger: log,
              maxBacklog: config.queue.max_backlog,
              signal,
            }),
          ),
        );
      }
    }
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
        sinks: sinkSpecs.map((s) => s.name),
        metrics_port: server.port,
      },
      'feedsync started',
    );
    let stopped: Promise<void> | undefined;
    return {
      events,
      metricsPort: server.port,
      admin,
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

/** Hold the source's lock while polling; if the lock is lost, stop and wait to win it back. */
async function pollWhileLocked(
  acquire: (signal: AbortSignal) => Promise<HeldLock | undefined>,
  stop: AbortSignal,
  logger: Logger,
  held: Set<string>,
  source: string,
  poll: (signal: AbortSignal) => Promise<void>,
): Promise<void> {
  while (!stop.aborted) {
    let lock: HeldLock | undefined;
    try {
      lock = await acquire(stop);
    } catch (err) {
      logger.error({ err: errorMessage(err) }, 'cannot take the source lock; retrying');
      await new Promise((r) => setTimeout(r, 1000));
      continue;
    }
    if (!lock) return;
    held.add(source);
    try {
      await poll(AbortSignal.any([stop, lock.lost]));
      if (lock.lost.aborted && !stop.aborted)
        logger.warn(
          { reason: errorMessage(lock.lost.reason) },
          'source lock lost or handed over; polling stopped until it is free again',
        );
    } finally {
      held.delete(source);
      await lock.release().catch(() => undefined);
    }
  }
}

function localLeases(locks: SqliteSourceLocks): SourceLeases {
  return {
    acquire: (source, signal, onWait) => locks.acquire(source, signal, onWait),
    holder: async (source) => locks.holder(source) ?? undefined,
  };
}
