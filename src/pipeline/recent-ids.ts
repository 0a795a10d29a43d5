/**
 * The ids of the events this process committed most recently for one source, oldest forgotten
 * first. It is what lets the poller tell an event listed behind the cursor that was delivered (a
 * re-listing: skip it) from one that never was (deliver it late), and what bounds the window the
 * feed audit can check. Memory: ~40 bytes per id (50,000 ids ≈ 2 MB).
 */
export class RecentIds {
  private readonly ids = new Set<number>();
  /** Ids ever added; `added - size` of them have been forgotten. */
  private added = 0;
  constructor(readonly capacity = 50_000) {}

  has(id: number): boolean {
    return this.ids.has(id);
  }

  add(id: number): void {
    if (this.ids.has(id)) return;
    this.ids.add(id);
    this.added++;
    if (this.ids.size > this.capacity) this.ids.delete(this.ids.values().next().value!);
  }

  /** How many ids were added so far (a position: ids added after it are all still known while `forgotten` is below it). */
  get total(): number {
    return this.added;
  }

  /** How many of the ids added so far have been forgotten. */
  get forgotten(): number {
    return this.added - this.ids.size;
  }
}
