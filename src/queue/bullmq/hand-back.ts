// Small async helpers for stopping in time: abandoning a sink call at the stop deadline, and
// bounding a wait.
import { withDeadline } from '../../backoff.js';

/** The sink call was abandoned because stop() ran out of time; the job goes back to its queue. */
export class HandedBack extends Error {
  override name = 'HandedBack';
}

/** Resolve/reject with `work`, or reject with HandedBack once `signal` aborts (work keeps running). */
export function raceHandBack<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    work.catch(() => undefined);
    return Promise.reject(new HandedBack());
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => {
      // The sink's promise settles later on its own; nobody is listening any more.
      work.catch(() => undefined);
      reject(new HandedBack());
    };
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(err);
      },
    );
  });
}

/** true when `work` settled (either way) within ms, false on timeout (work keeps running). */
export async function settledWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  const settled = work.then(
    () => true as const,
    () => true as const,
  );
  return (await withDeadline(settled, ms)) ?? false;
}
