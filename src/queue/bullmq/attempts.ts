// How far a slice job got, kept in the job's `progress` so the job data stays exactly the slice
// (listings and re-adds all see the same value). BullMQ's own attemptsMade is not used because
// retry-later failures never consume a BullMQ attempt (see delivery.ts).
import type { Job } from 'bullmq';

export interface SliceProgress {
  /** Changes of the slice already delivered or dead-lettered: always a prefix. */
  done: number;
  /** Delivery attempts spent on change number `done`. */
  attempts: number;
}

/** The job's progress; a missing or pre-slice (a bare number) progress reads as a fresh start. */
export function progressOf(job: Pick<Job, 'progress'>): SliceProgress {
  const progress: unknown = job.progress;
  if (typeof progress !== 'object' || progress === null) return { done: 0, attempts: 0 };
  const { done, attempts } = progress as Record<string, unknown>;
  return { done: count(done), attempts: count(attempts) };
}

function count(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) && value > 0 ? Math.floor(value) : 0;
}
