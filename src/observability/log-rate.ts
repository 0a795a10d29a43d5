// Rate limit for warnings that repeat while a problem lasts (a Redis that refuses a command answers
// the same way on every retry, several times a second). The first occurrence of a key is logged;
// after that at most one line per interval, carrying how many were left out since the last line,
// so an operator sees that it goes on without reading hundreds of identical lines.

export interface LogRateOptions {
  /** At most one line per key this often (default one minute). */
  intervalMs?: number;
  /** Keys remembered at most; the oldest is forgotten first (error texts can vary without bound). */
  maxKeys?: number;
  now?: () => number;
}

export interface LogRate {
  /**
   * Whether to log this occurrence of `key` now: `{ repeated }` (occurrences left out since the
   * last line of this key, 0 the first time) or undefined to leave it out.
   */
  admit(key: string): { repeated: number } | undefined;
  /** The keys with occurrences left out since their last line, and how many; resets them. */
  drain(): { key: string; repeated: number }[];
}

interface Entry {
  loggedAt: number;
  repeated: number;
}

export const DEFAULT_LOG_INTERVAL_MS = 60_000;

export function createLogRate(opts: LogRateOptions = {}): LogRate {
  const intervalMs = opts.intervalMs ?? DEFAULT_LOG_INTERVAL_MS;
  const maxKeys = opts.maxKeys ?? 1000;
  const now = opts.now ?? Date.now;
  const entries = new Map<string, Entry>();
  return {
    admit(key) {
      const at = now();
      const entry = entries.get(key);
      if (entry && at - entry.loggedAt < intervalMs) {
        entry.repeated++;
        return undefined;
      }
      const repeated = entry?.repeated ?? 0;
      // Re-inserted so that the map's order is by last line: the eviction below drops the stalest.
      entries.delete(key);
      entries.set(key, { loggedAt: at, repeated: 0 });
      if (entries.size > maxKeys) entries.delete(entries.keys().next().value as string);
      return { repeated };
    },
    drain() {
      const out: { key: string; repeated: number }[] = [];
      for (const [key, entry] of entries) {
        if (entry.repeated === 0) continue;
        out.push({ key, repeated: entry.repeated });
        entry.repeated = 0;
      }
      return out;
    },
  };
}
