// The embedded SQLite queue driver against the queue-driver conformance suite.
import { describeQueueDriverConformance } from './conformance.js';
import { driverConfig } from './support.js';

describeQueueDriverConformance('local', {
  config: (dir, sinks, queue) => driverConfig(dir, sinks, { driver: 'local', ...queue }),
  // A killed process's rows are simply still queued: the next one takes them at once.
  recoveryMs: 5_000,
});
