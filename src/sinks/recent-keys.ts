/**
 * A bounded set of recently seen keys. Sinks use it to drop redeliveries: at-least-once delivery
 * means the same change can arrive again, but only shortly after the first copy (a retry, a crash
 * before the ack), so remembering the most recent N keys is enough and keeps memory constant.
 */
export class RecentKeys {
  // A Set iterates in insertion order, so its first element is always the oldest key.
  private readonly keys = new Set<string>();

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
    this.keys.add(key);
    if (this.keys.size > this.capacity) {
      const oldest = this.keys.values().next().value as string;
      this.keys.delete(oldest);
    }
  }

  get size(): number {
    return this.keys.size;
  }
}
