import type { Logger } from 'pino';
import type { Change } from '../core/change.js';

export { NeverError, RetryLaterError } from '../core/errors.js';

/**
 * A sink receives changes. Lifecycle: the factory opens it, deliver() is called for each change
 * (possibly concurrently, up to `queue.concurrency`, never for two changes of the same subject at
 * once), close() once at the end. deliver() resolves when the change is durably accepted; it
 * throws RetryLaterError for "try again later" and NeverError for "this change can never be
 * delivered". Any other error counts as retry-later. Deliveries are at least once: a sink that
 * must not apply a change twice de-duplicates by `change.key`.
 */
export interface Sink {
  deliver(change: Change, context?: DeliveryContext): Promise<void>;
  /**
   * Optional: accept several changes in one call (one write, one fsync, one transaction). The
   * embedded queue then counts a batch as one delivery in flight. A batch never holds two changes
   * of the same subject, and it succeeds or fails as a whole: after a failure every change of it
   * is retried, so a sink that applied part of it must de-duplicate by key (the built-in ones do).
   */
  deliverBatch?(changes: Change[], context?: DeliveryContext): Promise<void>;
  close(): Promise<void>;
  /** Optional: false when the sink cannot currently accept deliveries. */
  healthy?(): Promise<boolean>;
}

/**
 * Who is delivering: the lease the delivering process holds over these changes. Tokens grow with
 * every takeover within one scope, so a sink that can compare and store them (a database in one
 * transaction with the change) refuses a change whose token is lower than one it already applied
 * for that scope: the delivery of a process that was frozen past its lease while another took over.
 */
export interface DeliveryFence {
  /** What the lease covers (`store:<path>` for the local queue). */
  scope: string;
  token: number;
  /** Whether the lease is still held by the monotonic clock (false: finish nothing new). */
  valid(): boolean;
}

export interface DeliveryContext {
  fence?: DeliveryFence;
  /**
   * Aborted when the call passes `queue.delivery_timeout_ms`: it has then failed and will be
   * retried, so stop (abort the request, roll back) instead of finishing it late.
   */
  signal?: AbortSignal;
}

export interface SinkContext {
  /** The sink's configured name. */
  name: string;
  logger: Logger;
  /** Directory of the config file: relative paths in options resolve against it. */
  configDir: string;
}

/** What users export from a `type: module` sink: `export default (options, context) => sink`. */
export type SinkFactory<Options = Record<string, unknown>> = (
  options: Options,
  context: SinkContext,
) => Sink | Promise<Sink>;
