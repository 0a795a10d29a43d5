// Which poll outcomes a source's status record must take. A catching-up poller finishes a page
// every few milliseconds: writing its status each time would cost more than it tells. A change of
// state (ok/error, behind/caught up) is written at once, and so is every failed poll; a run of
// alike successes at most once per interval. Both drivers' status stores use it (the local store's
// row, the scaled mode's Redis hash), so `status` and `/readyz` read the same with either.

/** How stale a source's status may get while its polls keep succeeding the same way. */
export const STATUS_WRITE_INTERVAL_MS = 1000;

export interface PollStatusThrottle {
  /** Whether this outcome is to be written. */
  due(source: string, outcome: { ok: boolean; behind: boolean }, now: number): boolean;
  /** It was written (a write that failed is not recorded: the next poll writes again). */
  written(source: string, outcome: { ok: boolean; behind: boolean }, now: number): void;
}

export function pollStatusThrottle(intervalMs = STATUS_WRITE_INTERVAL_MS): PollStatusThrottle {
  const last = new Map<string, { at: number; ok: boolean; behind: boolean }>();
  return {
    due(source, outcome, now) {
      const l = last.get(source);
      return !(outcome.ok && l?.ok && l.behind === outcome.behind && now - l.at < intervalMs);
    },
    written(source, outcome, now) {
      last.set(source, { at: now, ok: outcome.ok, behind: outcome.behind });
    },
  };
}
