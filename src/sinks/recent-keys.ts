/**
 * A bounded set of recently seen keys. Sinks use it to drop redeliveries: at-least-once delivery
 * means the same change can arrive again, but only shortly after the first copy (a retry, a crash
 * before the ack), so remembering the most recent N keys is enough and keeps memory constant.
 */
export class RecentKeys {
  private readonly keys = new Set<string>();
  // Insertion order in a ring: evicting the oldest is one array read. (Taking a Set's first
  // element instead walks past every entry deleted since V8 last rebuilt the table.)
  private readonly order: string[] = [];
  private next = 0;

  constructor(readonly capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new RangeError(`RecentKeys capacity must be a positive integer, got ${capacity}`);
    }
  }

  has(key: string): boolean {
    return this.keys.has(key);
  }

  add(key: string): void {
    if (this.keys.has(key)) return;
    if (this.order.length === this.capacity) this.keys.delete(this.order[this.next]!);
    this.order[this.next] = key;
    this.next = (this.next + 1) % this.capacity;
    this.keys.add(key);
  }

  get size(): number {
    return this.keys.size;
  }
}
