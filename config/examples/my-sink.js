// A user sink: appends "key event_type subject_url" lines to options.path (relative to the config).
import { appendFile, mkdir } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';

export default async function createSink(options, context) {
  const path = resolve(context.configDir, options.path ?? 'changes.txt');
  await mkdir(dirname(path), { recursive: true });
  const recent = new Map(); // key → its write: delivery is at least once, so repeats share the first
  return {
    async deliver(change) {
      if (!recent.has(change.key)) {
        const line = `${change.key} ${change.event_type} ${change.subject_url ?? '-'}\n`;
        const write = appendFile(path, line).catch((err) => {
          recent.delete(change.key); // a failed write must be retried, not remembered
          throw err; // a plain Error: feedsync retries it later
        });
        recent.set(change.key, write);
        if (recent.size > 10000) recent.delete(recent.keys().next().value);
      }
      await recent.get(change.key);
      context.logger.debug({ key: change.key }, 'change appended');
    },
    async close() {},
  };
}
