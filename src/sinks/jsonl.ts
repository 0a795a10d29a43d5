// The jsonl sink: one change per line, appended and fsynced, with group commit and key de-dup.
import { mkdir, open, stat, type FileHandle } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { z } from 'zod';
import { filterSchema, name, nonEmpty } from '../config/fields.js';
import { errorMessage, RetryLaterError } from '../core/errors.js';
import type { Change } from '../core/change.js';
import { changeJson } from '../core/change-json.js';
import { scanTail } from './jsonl-tail.js';
import { RecentKeys } from './recent-keys.js';
import type { SinkDefinition } from './definition.js';
import type { Sink, SinkContext } from './sink.js';

/** A `type: jsonl` entry of `sinks`. */
export const jsonlSinkSchema = z.strictObject({
  name,
  type: z.literal('jsonl'),
  path: nonEmpty,
  filter: filterSchema,
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

interface Waiter {
  key: string;
  line: string;
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
    if (this.closing) {
      return Promise.reject(
        new RetryLaterError(`sink "${this.name}": closed, cannot append to ${this.path}`),
      );
    }
    if (this.written.has(change.key)) return Promise.resolve();
    const existing = this.inProgress.get(change.key);
    if (existing) return existing;
    // The queue usually has the change's JSON already (the bytes it stored): not made again here.
    const line = changeJson(change) + '\n';
    const promise = new Promise<void>((resolve, reject) => {
      this.pending.push({ key: change.key, line, resolve, reject });
    });
    this.inProgress.set(change.key, promise);
    this.kick();
    return promise;
  }

  /** Submitted in one tick, so the group commit writes and fsyncs them together. */
  async deliverBatch(changes: Change[]): Promise<void> {
    await Promise.all(changes.map((c) => this.deliver(c)));
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
      const current = await stat(this.path).catch(() => undefined);
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
      const text = (this.needsNewline ? '\n' : '') + batch.map((w) => w.line).join('');
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
      this.stats.lines += batch.length;
      for (const w of batch) {
        this.written.add(w.key);
        this.inProgress.delete(w.key);
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
        this.inProgress.delete(w.key);
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
