// A source's budget of subject-body bytes held until their page commits (`max_page_bytes`,
// docs/upstream-security.md "Memory per page"). Each page that expands subjects opens a claim;
// every subject fetch reserves the most its body can be (`max_body_bytes`) before the request, keeps
// what the body turned out to be, and the claim gives it all back when the page commits or fails.
// So the bodies in flight and those held for the commit never exceed the budget together, whatever
// the upstream sends.
//
// Several pages may hold bytes at once: the page being committed, the one read ahead, a lagging
// sink's catch-up pages. A request waits only for bytes that will come back without it — its own
// page's fetches in flight, and claims ranked before its own (they never wait for it). The page
// read ahead is speculative and ranks last: it waits for the others, and a page that must commit
// first takes its bytes back by dropping it (it is read again when its turn comes); catch-up pages
// rank by age and the younger gives way the same way. A request that can never be met (its page
// alone needs more than the budget) is refused at once with a PageBudgetError: the page fails and
// the poller retries it with backoff.
import { FeedsyncError } from '../core/errors.js';

/** The page's subjects need more than `max_page_bytes`; its commit can never happen as it is. */
export class PageBudgetError extends FeedsyncError {
  override name = 'PageBudgetError';
  readonly limit = 'max_page_bytes';
  constructor(message: string) {
    super(message, true);
  }
}

/** A claim dropped to free its bytes for a page that commits before it. */
export class ClaimDroppedError extends Error {
  override name = 'ClaimDroppedError';
}

/** Bytes reserved for one fetch: keep what arrived, or cancel (the fetch failed). Idempotent. */
export interface Reservation {
  keep(bytes: number): void;
  cancel(): void;
}

interface Waiter {
  claim: PageClaim;
  bytes: number;
  /** For the refusal's message: what the bytes are for. */
  what: string;
  resolve: (r: Reservation) => void;
  reject: (err: Error) => void;
}

export class ByteBudget {
  private readonly claims: PageClaim[] = [];
  private waiters: Waiter[] = [];
  private opened = 0;

  constructor(readonly capacity: number) {}

  /** Bytes reserved or held by every open claim. */
  get used(): number {
    let sum = 0;
    for (const c of this.claims) sum += c.held + c.pending;
    return sum;
  }

  /**
   * A page's claim. `onDrop` lets a page that commits first take its bytes back by dropping it
   * (called once the claim is closed; the page aborts and is read again later); `speculative`
   * (the page read ahead) ranks it after every other page.
   */
  open(opts: { onDrop?: () => void; speculative?: boolean } = {}): PageClaim {
    const claim = new PageClaim(this, this.opened++, opts.onDrop, opts.speculative ?? false);
    this.claims.push(claim);
    return claim;
  }

  /** @internal PageClaim.tryReserve: granted at once, or not at all. */
  tryGrant(claim: PageClaim, bytes: number): Reservation | undefined {
    if (bytes > this.capacity - this.used) return undefined;
    // Pages waiting before it keep their turn.
    if (this.waiters.some((w) => rank(w.claim, claim) <= 0)) return undefined;
    return claim.grant(bytes);
  }

  /** @internal PageClaim.reserve */
  request(claim: PageClaim, bytes: number, what: string): Promise<Reservation> {
    return new Promise<Reservation>((resolve, reject) => {
      this.waiters.push({ claim, bytes, what, resolve, reject });
      this.pump();
    });
  }

  private pumping = false;
  private repump = false;

  /** @internal a claim's figures changed: grant, refuse or keep waiting, in rank order. */
  pump(): void {
    // Dropping a claim or settling a reservation calls back in here: the loop below takes it up.
    if (this.pumping) {
      this.repump = true;
      return;
    }
    this.pumping = true;
    try {
      do {
        this.repump = false;
        this.waiters.sort((a, b) => rank(a.claim, b.claim));
        if (this.step() === 'again') this.repump = true;
      } while (this.repump);
    } finally {
      this.pumping = false;
    }
  }

  /** Grants or refuses waiters in rank order; 'again' when a speculative claim was dropped. */
  private step(): 'again' | 'done' {
    for (const w of [...this.waiters]) {
      const free = this.capacity - this.used;
      if (w.bytes <= free) {
        this.remove(w);
        w.resolve(w.claim.grant(w.bytes));
        continue;
      }
      // Bytes that come back without this page's commit: its own fetches in flight, and the claims
      // ranked before it (they never wait for it). Those ranked after it may be waiting for it:
      // waiting for them could be waiting forever, so it drops the ones that can be dropped.
      let returning = w.claim.pending;
      let droppable = 0;
      for (const c of this.claims) {
        if (c === w.claim) continue;
        if (rank(c, w.claim) < 0) returning += c.held + c.pending;
        else if (c.droppable) droppable += c.held + c.pending;
      }
      if (free + returning >= w.bytes) return 'done'; // wait; nobody behind it overtakes
      if (free + returning + droppable >= w.bytes) {
        for (const c of [...this.claims])
          if (c !== w.claim && c.droppable && rank(c, w.claim) > 0 && c.held + c.pending > 0) c.drop();
        return 'again';
      }
      this.remove(w);
      w.reject(
        new PageBudgetError(
          `page refused: the ${w.what} may need up to ${w.bytes} bytes more, but the page already ` +
            `holds ${w.claim.held} bytes of subject bodies and max_page_bytes is ${this.capacity}`,
        ),
      );
    }
    return 'done';
  }

  private remove(w: Waiter): void {
    this.waiters = this.waiters.filter((x) => x !== w);
  }

  /** @internal PageClaim.release */
  close(claim: PageClaim, reason: Error): void {
    const at = this.claims.indexOf(claim);
    if (at >= 0) this.claims.splice(at, 1);
    for (const w of this.waiters.filter((x) => x.claim === claim)) {
      this.remove(w);
      w.reject(reason);
    }
    this.pump();
  }
}

/** Claims that commit first come first: in opening order, speculative ones (read ahead) last. */
function rank(a: PageClaim, b: PageClaim): number {
  if (a.speculative !== b.speculative) return a.speculative ? 1 : -1;
  return a.seq - b.seq;
}

/** One page's bytes: released, all at once, when the page commits or fails. */
export class PageClaim {
  /** Bytes of bodies that arrived, held until release(). */
  held = 0;
  /** Bytes reserved for fetches in flight. */
  pending = 0;
  private closed = false;

  constructor(
    private readonly budget: ByteBudget,
    readonly seq: number,
    private onDrop: (() => void) | undefined,
    public speculative: boolean,
  ) {}

  get droppable(): boolean {
    return this.onDrop !== undefined;
  }

  /** Whether the claim was dropped for a page that commits first (its page must be read again). */
  dropped = false;

  /** Waits until `bytes` can be reserved; PageBudgetError when they never can. */
  reserve(bytes: number, what: string): Promise<Reservation> {
    if (this.closed)
      return Promise.reject(
        this.dropped ? new ClaimDroppedError('page dropped') : new Error('claim released'),
      );
    return this.budget.request(this, bytes, what);
  }

  /** `bytes` at once if they are free, else undefined (it never waits: for callers holding a slot). */
  tryReserve(bytes: number): Reservation | undefined {
    if (this.closed) return undefined;
    return this.budget.tryGrant(this, bytes);
  }

  /** The page is taken up for commit: it ranks by its opening and can no longer be dropped. */
  promote(): void {
    this.onDrop = undefined;
    this.speculative = false;
    this.budget.pump();
  }

  /** Gives every byte back (commit or failure); the claim's waiting requests are refused. */
  release(): void {
    if (this.closed) return;
    this.closed = true;
    this.held = 0;
    this.pending = 0;
    this.budget.close(this, new Error('claim released'));
  }

  /** @internal ByteBudget: frees the bytes for a page that commits first. */
  drop(): void {
    if (this.closed) return;
    const onDrop = this.onDrop;
    this.dropped = true;
    this.closed = true;
    this.held = 0;
    this.pending = 0;
    this.budget.close(this, new ClaimDroppedError('page read ahead dropped to free its bytes'));
    onDrop?.();
  }

  /** @internal ByteBudget: `bytes` granted. */
  grant(bytes: number): Reservation {
    this.pending += bytes;
    let settled = false;
    const settle = (kept: number) => {
      if (settled) return;
      settled = true;
      if (this.closed) return;
      this.pending -= bytes;
      this.held += kept;
      this.budget.pump();
    };
    return { keep: (n) => settle(Math.max(0, Math.min(n, bytes))), cancel: () => settle(0) };
  }
}
