// The jsonl sink: one change per line, appended and fsynced, with group commit and key de-dup.
import { statSync } from 'node:fs';
import { mkdir, open, stat, type FileHandle } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { z } from 'zod';
import { nonEmpty, sinkCommonFields } from '../config/fields.js';
import { errorMessage, RetryLaterError } from '../core/errors.js';
import type { Change } from '../core/change.js';
import { changeJson } from '../core/change-json.js';
import { scanTail } from './jsonl-tail.js';
import { RecentKeys } from './recent-keys.js';
import type { SinkDefinition } from './definition.js';
import type { Sink, SinkContext } from './sink.js';

/** A `type: jsonl` entry of `sinks`. */
export const jsonlSinkSchema = z.strictObject({
  ...sinkCommonFields,
  type: z.literal('jsonl'),
  path: nonEmpty,
});
export type JsonlSinkConfig = z.output<typeof jsonlSinkSchema>;

export interface JsonlSinkOptions {
  /** How much of the end of an existing file to read back at open for de-duplication. */
  tailBytes?: number;
  /** How many recent keys to remember. */
  rememberKeys?: number;
}

export interface JsonlSink extends Sink {
  /** Counters for observing group commit: each batch is one write + one fsync. */
  readonly stats: { batches: number; lines: number };
  /** False while the last write failed (or after close). */
  healthy(): Promise<boolean>;
}

/** One delivery call waiting for the next write: its new keys and their lines. */
interface Waiter {
  keys: string[];
  text: string;
  resolve(): void;
  reject(err: unknown): void;
}

const DEFAULT_TAIL_BYTES = 4 * 1024 * 1024;
// Redeliveries follow the first copy closely (a retried batch, a stalled job); a restart re-reads
// the file's tail instead. 20k keys cost about 1.5 MB.
const DEFAULT_REMEMBER_KEYS = 20_000;

export async function openJsonlSink(
  config: JsonlSinkConfig,
  ctx: SinkContext,
  options: JsonlSinkOptions = {},
): Promise<JsonlSink> {
  const sink = new JsonlFileSink(
    config.name,
    resolve(ctx.configDir, config.path),
    ctx,
    options.tailBytes ?? DEFAULT_TAIL_BYTES,
    options.rememberKeys ?? DEFAULT_REMEMBER_KEYS,
  );
  try {
    await sink.ensureOpen();
  } catch (err) {
    // A missing mount at start-up should not stop the daemon: deliveries retry until it is back.
    ctx.logger.warn(
      { sink: config.name, path: sink.path, err: errorMessage(err) },
      'jsonl sink cannot open its file yet',
    );
  }
  return sink;
}

class JsonlFileSink implements JsonlSink {
  readonly stats = { batches: 0, lines: 0 };
  private readonly written: RecentKeys;
  /** Keys queued or being written, so a concurrent duplicate shares the first copy's outcome. */
  private readonly inProgress = new Map<string, Promise<void>>();
  private pending: Waiter[] = [];
  private flushing: Promise<void> | undefined;
  private handle: FileHandle | undefined;
  private inode = -1;
  private needsNewline = false;
  private lastWriteFailed = false;
  private closing: Promise<void> | undefined;

  constructor(
    readonly name: string,
    readonly path: string,
    private readonly ctx: SinkContext,
    private readonly tailBytes: number,
    rememberKeys: number,
  ) {
    this.written = new RecentKeys(rememberKeys);
  }

  deliver(change: Change): Promise<void> {
    return this.deliverBatch([change]);
  }

  /** Submitted together, so the group commit writes and fsyncs them with whatever else is queued. */
  deliverBatch(changes: Change[]): Promise<void> {
    if (this.closing) {
      return Promise.reject(
        new RetryLaterError(`sink "${this.name}": closed, cannot append to ${this.path}`),
      );
    }
    let settle!: Pick<Waiter, 'resolve' | 'reject'>;
    const written = new Promise<void>((resolve, reject) => (settle = { resolve, reject }));
    const keys: string[] = [];
    let text = '';
    // A key being written by an earlier call (or twice in this one) shares that write's outcome.
    let earlier: Promise<void>[] | undefined;
    for (const change of changes) {
      if (this.written.has(change.key)) continue;
      const existing = this.inProgress.get(change.key);
      if (existing) {
        if (existing !== written) (earlier ??= []).push(existing);
        continue;
      }
      this.inProgress.set(change.key, written);
      keys.push(change.key);
      // The queue usually has the change's JSON already (the bytes it stored): not made again here.
      text += changeJson(change) + '\n';
    }
    if (keys.length === 0) settle.resolve();
    else {
      this.pending.push({ keys, text, ...settle });
      this.kick();
    }
    if (!earlier) return written;
    earlier.push(written);
    return Promise.all(earlier).then(() => undefined);
  }

  private kick(): void {
    if (this.flushing) return;
    this.flushing = this.flushLoop().finally(() => {
      this.flushing = undefined;
      // A delivery can slip in between the loop's last check and this callback.
      if (this.pending.length > 0) this.kick();
    });
  }

  async healthy(): Promise<boolean> {
    return !this.closing && !this.lastWriteFailed;
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      // Let everything already accepted reach the disk before the handle goes away.
      while (this.flushing) await this.flushing;
      await this.closeHandle();
    })();
    return this.closing;
  }

  /** Opens (or reopens after rotation/deletion) the file and reads back its tail. */
  async ensureOpen(): Promise<FileHandle> {
    if (this.handle) {
      // Synchronous: one stat system call, where the promise form costs a thread-pool round trip
      // per batch (it showed in drain profiles).
      const current = statSync(this.path, { throwIfNoEntry: false });
      if (current && current.ino === this.inode) return this.handle;
      // The file was renamed or removed (log rotation): start a new one at the configured path.
      await this.closeHandle();
    }
    const dir = dirname(this.path);
    await mkdir(dir, { recursive: true });
    const existed = await stat(this.path).then(
      () => true,
      () => false,
    );
    const handle = await open(this.path, 'a+');
    try {
      const scan = await scanTail(handle, this.tailBytes);
      for (const key of scan.keys) this.written.add(key);
      this.needsNewline = scan.endsMidLine;
      this.inode = (await handle.stat()).ino;
      if (!existed) await syncDirectory(dir);
    } catch (err) {
      await handle.close().catch(() => undefined);
      throw err;
    }
    this.handle = handle;
    return handle;
  }

  private async flushLoop(): Promise<void> {
    // Yield once so deliveries issued in the same tick join the first batch.
    await null;
    while (this.pending.length > 0) {
      const batch = this.pending;
      this.pending = [];
      await this.writeBatch(batch);
    }
  }

  private async writeBatch(batch: Waiter[]): Promise<void> {
    try {
      const handle = await this.ensureOpen();
      let text = this.needsNewline ? '\n' : '';
      for (const w of batch) text += w.text;
      const buf = Buffer.from(text, 'utf8');
      let offset = 0;
      while (offset < buf.length) {
        const { bytesWritten } = await handle.write(buf, offset, buf.length - offset);
        offset += bytesWritten;
      }
      await handle.datasync();
      this.needsNewline = false;
      this.lastWriteFailed = false;
      this.stats.batches += 1;
      for (const w of batch) {
        this.stats.lines += w.keys.length;
        for (const key of w.keys) {
          this.written.add(key);
          this.inProgress.delete(key);
        }
        w.resolve();
      }
    } catch (err) {
      this.lastWriteFailed = true;
      // Part of the batch may be on disk: reopening re-reads the tail, which re-seeds the keys
      // that did land and notices a torn last line.
      await this.closeHandle();
      const error = new RetryLaterError(
        `sink "${this.name}": cannot append to ${this.path}: ${errorMessage(err)}`,
        undefined,
        { cause: err },
      );
      for (const w of batch) {
        for (const key of w.keys) this.inProgress.delete(key);
        w.reject(error);
      }
    }
  }

  private async closeHandle(): Promise<void> {
    const handle = this.handle;
    this.handle = undefined;
    this.inode = -1;
    if (handle) await handle.close().catch(() => undefined);
  }
}

/** Makes a newly created file's directory entry durable, not just its contents. */
async function syncDirectory(dir: string): Promise<void> {
  let handle: FileHandle | undefined;
  try {
    handle = await open(dir, 'r');
    await handle.sync();
  } catch {
    // Not supported everywhere (some filesystems refuse fsync on directories); contents still are.
  } finally {
    await handle?.close().catch(() => undefined);
  }
}

export const jsonlSink = {
  type: 'jsonl',
  schema: jsonlSinkSchema,
  open: (config, ctx) => openJsonlSink(config, ctx),
} satisfies SinkDefinition<JsonlSinkConfig>;
