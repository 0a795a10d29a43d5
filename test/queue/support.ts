// A driver's config for tests that open a queue driver directly (no daemon, no upstream).
import { join } from 'node:path';
import { validateConfig } from '../../src/config/load.js';
import type { FeedsyncConfig } from '../../src/config/types.js';

/** A valid config: one unreachable source (never polled here) and a jsonl entry per sink name. */
export function driverConfig(
  dir: string,
  sinkNames: string[],
  queue: Record<string, unknown> = {},
): FeedsyncConfig {
  return validateConfig(
    {
      store: { path: join(dir, 'store.db') },
      queue: { attempts: 4, backoff_ms: 5, max_backoff_ms: 20, concurrency: 4, ...queue },
      sources: [
        { name: 'src', service: 'workflow', base_url: 'http://127.0.0.1:9', username: 'u', password: 'p' },
      ],
      sinks: sinkNames.map((name) => ({ name, type: 'jsonl', path: join(dir, `${name}.jsonl`) })),
      http: { host: '127.0.0.1', port: 0 },
    },
    { dir },
  );
}
