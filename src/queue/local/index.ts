// The embedded queue driver: producer, delivery, admin, source state and leases all share one
// SQLite store, so it lives inside one `feedsync run` process (plus the ops commands beside it).
import { ConfigError } from '../../core/errors.js';
import { CursorStore } from '../../store/cursors.js';
import { openStore } from '../../store/store.js';
import type { DriverFactory, QueueDriver } from '../driver.js';
import { sqliteSourceState } from '../sqlite-source-state.js';
import { StoreOwnership } from './ownership.js';
import { storeLeases } from './store-leases.js';
import { LocalAdmin } from './admin.js';
import { Backlog } from './backlog.js';
import { LocalDelivery } from './delivery.js';
import { LocalProducer } from './producer.js';
import { producerSinks, reportForgotten, reportParked } from '../sink-positions.js';
import { localPositionsAdmin } from './positions-admin.js';

const RUN_BUSY_TIMEOUT_MS = 100;

export const createLocalDriver: DriverFactory = async ({ config, mode, sinks, events, logger }) => {
  if (mode === 'poll' || mode === 'work')
    throw new ConfigError(
      'queue.driver',
      `"feedsync ${mode}" needs queue.driver: bullmq (the local queue lives inside one "feedsync run" process)`,
    );
  // The daemon never blocks its event loop long on another process's lock (see openStore).
  const db = openStore(config.store.path, mode === 'run' ? { busyTimeoutMs: RUN_BUSY_TIMEOUT_MS } : {});
  const cursors = new CursorStore(db);
  const names = config.sinks.map((s) => s.name);
  const ownership = new StoreOwnership(db, { ttlMs: config.queue.lease_ttl_ms });
  const positions = localPositionsAdmin(db, cursors, producerSinks(config));
  const parts: QueueDriver = {
    admin: new LocalAdmin(db, names),
    positions,
    sourceState: sqliteSourceState(cursors),
    leases: storeLeases(ownership, db, cursors, config.queue.lease_ttl_ms),
    checks: { store: () => db.open },
    close: async () => {
      ownership.release();
      if (db.open) db.close();
    },
  };
  if (mode === 'run') {
    const delivery = new LocalDelivery(db, sinks, config.queue, events, logger, ownership);
    parts.producer = new LocalProducer(
      db,
      cursors,
      producerSinks(config),
      positions,
      new Backlog(db),
      (slices) => delivery.queued(slices),
      (sink, changes) => delivery.takes(sink, changes),
      (source, sink) => reportParked(events, logger, source, sink),
      (source, forgotten) => reportForgotten(logger, source, forgotten),
    );
    parts.delivery = delivery;
    // A standby (another `run` owns the store) is not doing its job: /readyz says so.
    parts.checks.store_owner = () => ownership.valid();
    parts.fatal = ownership.lost;
    parts.admin = new LocalAdmin(db, names, () => delivery.inFlightCounts());
  }
  return parts;
};
