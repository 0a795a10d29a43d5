// Follows a growing jsonl sink file incrementally (only new bytes are read) and tracks which of the
// expected change keys have arrived. A torn last line is kept back until its newline is written.
import { closeSync, existsSync, openSync, readSync } from 'node:fs';

const KEY = /"key":"((?:[^"\\]|\\.)*)"/;
const CHUNK = 1 << 20;

export class JsonlTail {
  private fd: number | undefined;
  private offset = 0;
  private partial = '';
  private readonly missing: Set<string>;
  lines = 0;

  constructor(
    private readonly path: string,
    expectedKeys: Iterable<string>,
  ) {
    this.missing = new Set(expectedKeys);
  }

  /** Reads what was appended since the last call; returns how many expected keys are still missing. */
  poll(onLine?: (line: string) => void): number {
    if (this.fd === undefined) {
      if (!existsSync(this.path)) return this.missing.size;
      this.fd = openSync(this.path, 'r');
    }
    const buf = Buffer.allocUnsafe(CHUNK);
    for (;;) {
      const n = readSync(this.fd, buf, 0, CHUNK, this.offset);
      if (n <= 0) break;
      this.offset += n;
      const text = this.partial + buf.toString('utf8', 0, n);
      const lines = text.split('\n');
      this.partial = lines.pop() ?? '';
      for (const line of lines) {
        if (line === '') continue;
        this.lines++;
        const m = KEY.exec(line);
        if (m) this.missing.delete(m[1] as string);
        onLine?.(line);
      }
    }
    return this.missing.size;
  }

  get missingCount(): number {
    return this.missing.size;
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}
