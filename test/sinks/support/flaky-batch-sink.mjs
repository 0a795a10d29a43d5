// A user sink for the probe-gate suite that takes batches: while the file options.down_flag
// exists every call fails (an error *named* RetryLaterError, without a wait, as a plain module
// would throw it). Every call appends {at, keys, ok} to options.path, so the test can count the
// calls that reached the sink and the changes each successful one applied.
import { appendFileSync, existsSync } from 'node:fs';

export default function createSink(options) {
  const call = async (changes) => {
    const ok = !existsSync(options.down_flag);
    const record = { at: Date.now(), keys: changes.map((c) => c.key), ok };
    appendFileSync(options.path, JSON.stringify(record) + '\n');
    if (!ok) {
      const err = new Error('flaky-batch-sink: down');
      err.name = 'RetryLaterError';
      throw err;
    }
  };
  return { deliver: (change) => call([change]), deliverBatch: call, async close() {} };
}
