// What this process saw its sinks do, for the console: changes delivered per minute over the last
// hour (a ring of 60 counters per sink), the last errors, and whether the probe gate holds the
// sink as failing. Only a process that delivers (`run`, `work`) sees any of it; the positions and
// counts of every sink, from any process, come from the queue (readStatus).
import { errorMessage } from '../core/errors.js';
import type { PipelineEvents } from '../core/events.js';
import { cut } from '../core/bounded-text.js';

const MINUTES = 60;
const ERRORS_KEPT = 10;
/** An error is upstream- or receiver-supplied text: kept short. */
const ERROR_CHARS = 500;

export interface SinkActivity {
  sink: string;
  /** Changes delivered in each of the last 60 minutes, oldest first; the last is the current minute. */
  delivered_per_minute: number[];
  /** Changes that failed an attempt, per minute, aligned with delivered_per_minute. */
  failed_per_minute: number[];
  /** The probe gate holds it as failing (only probes reach it). */
  failing: boolean;
  /** The newest last: when and what. */
  recent_errors: { at: string; outcome: 'retry' | 'dead'; error: string }[];
}

interface Ring {
  delivered: number[];
  failed: number[];
  /** The minute (epoch ms / 60000) of the ring's last slot. */
  minute: number;
  failing: boolean;
  errors: SinkActivity['recent_errors'];
}

export interface ActivityLog {
  read(): SinkActivity[];
  close(): void;
}

export function watchActivity(
  events: PipelineEvents,
  sinks: string[],
  now: () => number = Date.now,
): ActivityLog {
  const rings = new Map<string, Ring>(
    sinks.map((s) => [
      s,
      { delivered: zeros(), failed: zeros(), minute: minuteOf(now()), failing: false, errors: [] },
    ]),
  );
  /** Moves the ring to the current minute, zeroing the minutes nothing happened in. */
  const current = (sink: string): Ring | undefined => {
    const ring = rings.get(sink);
    if (!ring) return undefined;
    const minute = minuteOf(now());
    const shift = Math.min(MINUTES, minute - ring.minute);
    if (shift > 0) {
      for (const counts of [ring.delivered, ring.failed]) {
        counts.splice(0, shift);
        counts.push(...zeros().slice(0, shift));
      }
      ring.minute = minute;
    }
    return ring;
  };
  const off = [
    events.on('delivery:finished', (e) => {
      const ring = current(e.sink);
      if (!ring) return;
      const last = MINUTES - 1;
      if (e.outcome === 'ok') ring.delivered[last] = (ring.delivered[last] ?? 0) + e.changes.length;
      else {
        ring.failed[last] = (ring.failed[last] ?? 0) + e.changes.length;
        ring.errors.push({
          at: new Date(now()).toISOString(),
          outcome: e.outcome,
          error: cut(e.error === undefined ? 'failed' : errorMessage(e.error), ERROR_CHARS),
        });
        if (ring.errors.length > ERRORS_KEPT) ring.errors.shift();
      }
    }),
    events.on('sink:failing', (e) => {
      const ring = rings.get(e.sink);
      if (ring) ring.failing = e.failing;
    }),
  ];
  return {
    read: () =>
      sinks.map((sink) => {
        const ring = current(sink) as Ring;
        return {
          sink,
          delivered_per_minute: [...ring.delivered],
          failed_per_minute: [...ring.failed],
          failing: ring.failing,
          recent_errors: [...ring.errors],
        };
      }),
    close: () => off.forEach((f) => f()),
  };
}

const zeros = () => Array.from({ length: MINUTES }, () => 0);
const minuteOf = (ms: number) => Math.floor(ms / 60_000);
