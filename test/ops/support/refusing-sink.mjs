// A user sink for dead-letter tests: appends each change's key to options.path, except that while
// the file options.refuse_flag exists it refuses (for good) every change whose event_id is a
// multiple of options.every. The error is *named* NeverError, as a plain user module would do.
import { appendFileSync, existsSync } from 'node:fs';

export default function createSink(options) {
  return {
    async deliver(change) {
      if (existsSync(options.refuse_flag) && change.event_id % options.every === 0) {
        const err = new Error(`refusing ${change.key} on purpose`);
        err.name = 'NeverError';
        throw err;
      }
      appendFileSync(options.path, `${change.key}\n`);
    },
    async close() {},
  };
}
