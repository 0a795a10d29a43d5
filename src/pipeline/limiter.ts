/**
 * At most `limit` tasks at once, started in the order they were submitted. A source's subject GETs
 * share one, so `subject_concurrency` holds while a page read ahead expands beside the current one,
 * and the current page (submitted first) is served first.
 */
export class Limiter {
  private active = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly limit: number) {}

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.active < Math.max(1, this.limit)) this.active++;
    // A finishing task hands its slot straight to the next waiter, so `active` stays counted.
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await task();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.active--;
    }
  }
}
