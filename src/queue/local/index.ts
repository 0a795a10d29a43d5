import type { Logger } from 'pino';
import type { QueueConfig, SinkFilter } from '../../config/types.js';
import type { PipelineEvents } from '../../core/events.js';
import type { CursorStore } from '../../store/cursors.js';
import type { Db } from '../../store/store.js';
import type { SinkRuntime } from '../queue.js';
import { LocalAdmin } from './admin.js';
import { Backlog } from './backlog.js';
import { LocalDelivery } from './delivery.js';
import { LocalProducer } from './producer.js';

const RECOUNT_MS = 10_000;

/** The embedded queue in one process: producer, delivery and admin sharing the store. */
export function createLocalQueue(opts: {
  db: Db;
  cursors: CursorStore;
  queue: QueueConfig;
  sinks: { name: string; filter: SinkFilter }[];
  runtimes: SinkRuntime[];
  events: PipelineEvents;
  logger: Logger;
}) {
  const names = opts.sinks.map((s) => s.name);
  const backlog = new Backlog(opts.db, names);
  const delivery = new LocalDelivery(opts.db, opts.runtimes, opts.queue, opts.events, opts.logger, backlog);
  const producer = new LocalProducer(opts.db, opts.cursors, opts.sinks, backlog, () => delivery.wake());
  const admin = new LocalAdmin(opts.db, names, () => delivery.inFlightCounts());
  const recount = setInterval(() => backlog.recount(), RECOUNT_MS);
  recount.unref();
  return {
    producer,
    delivery,
    admin,
    close: () => clearInterval(recount),
  };
}
