// A counting semaphore, first come first served: a source's subject GETs share one (so
// `subject_concurrency` holds while a page read ahead expands beside the current one, and the
// current page, submitted first, is served first), and each sink's BullMQ workers share one
// (`queue.concurrency`). Its waiters can be turned away all at once (on shutdown), so a job that
// never started delivering can be handed back to the queue instead of holding up stop().

export class SemaphoreClosedError extends Error {
  override name = 'SemaphoreClosedError';
}

export class Semaphore {
  private available: number;
  private readonly waiters: { resolve: () => void; reject: (err: Error) => void }[] = [];
  private closed = false;

  constructor(permits: number) {
    this.available = Math.max(1, Math.floor(permits));
  }

  /** Resolves with a release function; rejects with SemaphoreClosedError once close() was called. */
  async acquire(): Promise<() => void> {
    if (this.closed) throw new SemaphoreClosedError('semaphore closed');
    if (this.available > 0) {
      this.available--;
    } else {
      await new Promise<void>((resolve, reject) => this.waiters.push({ resolve, reject }));
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiters.shift();
      // Hand the permit straight to the next waiter so a newcomer cannot overtake it.
      if (next) next.resolve();
      else this.available++;
    };
  }

  /** Runs `task` holding a permit. */
  async run<T>(task: () => Promise<T>): Promise<T> {
    const release = await this.acquire();
    try {
      return await task();
    } finally {
      release();
    }
  }

  /** Reject every current and future waiter; permits already held stay valid until released. */
  close(): void {
    this.closed = true;
    for (const waiter of this.waiters.splice(0)) waiter.reject(new SemaphoreClosedError('semaphore closed'));
  }
}
