// The module sink: loads a user's ES module, calls its factory and guards what comes back.
import { existsSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { nonEmpty, sinkCommonFields } from '../config/fields.js';
import { ConfigError, errorMessage, FeedsyncError, NeverError, RetryLaterError } from '../core/errors.js';
import type { Change } from '../core/change.js';
import type { SinkDefinition } from './definition.js';
import type { DeliveryContext, Sink, SinkContext, SinkFactory } from './sink.js';

/** A `type: module` entry of `sinks`. */
export const moduleSinkSchema = z.strictObject({
  ...sinkCommonFields,
  type: z.literal('module'),
  /** Resolved to an absolute path (relative to the config file's directory) by config/load.ts. */
  module: nonEmpty,
  options: z.record(z.string(), z.unknown()).default({}),
});
export type ModuleSinkConfig = z.output<typeof moduleSinkSchema>;

export async function openModuleSink(config: ModuleSinkConfig, ctx: SinkContext): Promise<Sink> {
  const keyPath = `sinks.${config.name}.module`;
  const modulePath = config.module;
  if (!existsSync(modulePath)) throw new ConfigError(keyPath, `module file not found: ${modulePath}`);
  let exports: Record<string, unknown>;
  try {
    exports = (await import(pathToFileURL(modulePath).href)) as Record<string, unknown>;
  } catch (err) {
    throw new ConfigError(keyPath, `cannot load ${modulePath}: ${errorMessage(err)}`);
  }
  const factory = typeof exports.default === 'function' ? exports.default : exports.createSink;
  if (typeof factory !== 'function') {
    throw new ConfigError(
      keyPath,
      `${modulePath} exports no sink factory: export default (options, context) => sink, or export createSink`,
    );
  }
  let user: unknown;
  try {
    user = await (factory as SinkFactory)(config.options, ctx);
  } catch (err) {
    throw new FeedsyncError(
      `sink "${config.name}": factory of ${modulePath} failed: ${errorMessage(err)}`,
      true,
      {
        cause: err,
      },
    );
  }
  const shape = user as Partial<Record<keyof Sink, unknown>> | null | undefined;
  if (typeof shape?.deliver !== 'function' || typeof shape.close !== 'function') {
    throw new ConfigError(
      keyPath,
      `the factory of ${modulePath} must return an object with deliver(change) and close() functions, got ${describe(user)}`,
    );
  }
  return new GuardedSink(config.name, modulePath, user as Sink);
}

/** Makes a user's sink follow the lifecycle rules whatever it does. */
class GuardedSink implements Sink {
  private closing: Promise<void> | undefined;

  /** Offered only when the user's module offers it: the queue then sends it runs of changes. */
  readonly deliverBatch?: (changes: Change[], context?: DeliveryContext) => Promise<void>;

  constructor(
    private readonly name: string,
    private readonly modulePath: string,
    private readonly inner: Sink,
  ) {
    if (typeof inner.deliverBatch === 'function') {
      const batch = inner.deliverBatch.bind(inner);
      this.deliverBatch = async (changes, context) => {
        if (this.closing) throw new RetryLaterError(`sink "${this.name}": closed`);
        try {
          await batch(changes, context);
        } catch (err) {
          throw this.classify(err, changes[0]?.key ?? '(empty batch)');
        }
      };
    }
  }

  /** `context.fence` reaches the module: a module that can fence refuses a stale writer (docs). */
  async deliver(change: Change, context?: DeliveryContext): Promise<void> {
    if (this.closing) throw new RetryLaterError(`sink "${this.name}": closed`);
    try {
      await this.inner.deliver(change, context);
    } catch (err) {
      throw this.classify(err, change.key);
    }
  }

  async healthy(): Promise<boolean> {
    if (this.closing) return false;
    if (typeof this.inner.healthy !== 'function') return true;
    try {
      return (await this.inner.healthy()) !== false;
    } catch {
      return false;
    }
  }

  close(): Promise<void> {
    // Users' close() need not be idempotent: it is called once whatever the caller does.
    this.closing ??= Promise.resolve()
      .then(() => this.inner.close())
      .catch((err: unknown) => {
        throw new FeedsyncError(
          `sink "${this.name}" (${this.modulePath}): close failed: ${errorMessage(err)}`,
          false,
          {
            cause: err,
          },
        );
      });
    return this.closing;
  }

  /**
   * Our own error classes pass through. A user module that cannot import them (a plain script, or
   * another copy of the package) may throw errors *named* NeverError / RetryLaterError instead;
   * anything else counts as retry-later.
   */
  private classify(err: unknown, key: string): Error {
    if (err instanceof NeverError || err instanceof RetryLaterError) return err;
    const where = `sink "${this.name}" (${this.modulePath}) failed on ${key}: ${errorMessage(err)}`;
    const name = (err as { name?: unknown } | null)?.name;
    if (name === 'NeverError') return new NeverError(where, { cause: err });
    const retryAfter = (err as { retryAfterMs?: unknown } | null)?.retryAfterMs;
    const retryAfterMs =
      name === 'RetryLaterError' && typeof retryAfter === 'number' ? retryAfter : undefined;
    return new RetryLaterError(where, retryAfterMs, { cause: err });
  }
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value !== 'object') return typeof value;
  const keys = Object.keys(value);
  return keys.length ? `an object with keys ${keys.slice(0, 5).join(', ')}` : 'an empty object';
}

export const moduleSink = {
  type: 'module',
  schema: moduleSinkSchema,
  open: (config, ctx) => openModuleSink(config, ctx),
} satisfies SinkDefinition<ModuleSinkConfig>;
