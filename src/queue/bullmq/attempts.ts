// Our own delivery-attempt counter. It lives in the job's `progress` field so the job data stays
// exactly the change (sinks, DLQ listings and re-adds all see the same value); BullMQ's own
// attemptsMade is not used because retry-later failures never consume a BullMQ attempt.
import type { Job } from 'bullmq';

export function attemptsOf(job: Pick<Job, 'progress'>): number {
  const progress = job.progress;
  return typeof progress === 'number' && Number.isFinite(progress) && progress > 0 ? Math.floor(progress) : 0;
}
