// A module sink for the live-latency run: records, per delivery, sink-acknowledged time minus the
// event's timestamp (ms) as "key occurred_ms latency_ms" lines in options.path. Loaded by `feedsync run` from dist.
import { appendFileSync } from 'node:fs';
import type { Change } from '../../dist/core/change.js';
import type { Sink, SinkContext } from '../../dist/sinks/sink.js';

export default function createLatencySink(options: Record<string, unknown>, _ctx: SinkContext): Sink {
  if (typeof options.path !== 'string' || options.path === '') {
    throw new Error('latency sink: options.path (the output file) is required');
  }
  const path = options.path;
  return {
    deliver(change: Change): Promise<void> {
      // Acknowledged = now: the append is what "accepted" means for this sink.
      const latency = Date.now() - Date.parse(change.occurred_at);
      appendFileSync(path, `${change.key} ${Date.parse(change.occurred_at)} ${latency}\n`);
      return Promise.resolve();
    },
    close: () => Promise.resolve(),
  };
}
