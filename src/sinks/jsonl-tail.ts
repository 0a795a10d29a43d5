// Reads back the end of a JSON-lines file the jsonl sink appends to, so a restarted sink knows
// which keys it already wrote and whether the file ends cleanly.
import type { FileHandle } from 'node:fs/promises';

export interface TailScan {
  /** Keys of the complete, parseable lines found in the tail, oldest first. */
  keys: string[];
  /** True when the file is non-empty and its last byte is not "\n" (a torn or unterminated line). */
  endsMidLine: boolean;
}

/** Scans at most the last `maxBytes` of the file; a line cut by that window is ignored. */
export async function scanTail(handle: FileHandle, maxBytes: number): Promise<TailScan> {
  const { size } = await handle.stat();
  if (size === 0) return { keys: [], endsMidLine: false };
  const length = Math.min(size, maxBytes);
  const start = size - length;
  const buf = Buffer.alloc(length);
  let filled = 0;
  while (filled < length) {
    const { bytesRead } = await handle.read(buf, filled, length - filled, start + filled);
    if (bytesRead === 0) break;
    filled += bytesRead;
  }
  const text = buf.subarray(0, filled).toString('utf8');
  const endsMidLine = !text.endsWith('\n');
  const lines = text.split('\n');
  // The last piece is either "" (file ends with "\n") or a torn line; neither is a record.
  lines.pop();
  // When the window starts mid-file, its first piece is the tail end of a longer line.
  if (start > 0) lines.shift();
  const keys: string[] = [];
  for (const line of lines) {
    const key = keyOfLine(line);
    if (key !== undefined) keys.push(key);
  }
  return { keys, endsMidLine };
}

/** The `key` of one JSON line, or undefined for blank, torn or foreign lines. */
export function keyOfLine(line: string): string | undefined {
  if (line.trim() === '') return undefined;
  try {
    const value: unknown = JSON.parse(line);
    if (value !== null && typeof value === 'object' && typeof (value as { key?: unknown }).key === 'string') {
      return (value as { key: string }).key;
    }
  } catch {
    // A torn line from a crash mid-write: skipped by design.
  }
  return undefined;
}
