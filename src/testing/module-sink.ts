// Opens a `type: module` sink exactly as `feedsync run` would: the same loader, the same checks of
// what the factory returns, the same classification of thrown errors (a plain Error is "retry
// later"), and at most one close(). Testing through it tests what feedsync will see.
import { dirname, resolve } from 'node:path';
import { pino, type Logger } from 'pino';
import { openModuleSink } from '../sinks/module.js';
import type { Sink } from '../sinks/sink.js';

export interface ModuleSinkOptions {
  /** The sink's `options` from the config. */
  options?: Record<string, unknown>;
  /** `context.configDir`: where relative paths in options resolve. Default: the module's directory. */
  configDir?: string;
  /** The sink's name in the config; error messages start with it. Default "module". */
  name?: string;
  /** `context.logger`; default silent. */
  logger?: Logger;
}

export function loadModuleSink(modulePath: string, opts: ModuleSinkOptions = {}): Promise<Sink> {
  const module = resolve(modulePath);
  const name = opts.name ?? 'module';
  return openModuleSink(
    {
      name,
      type: 'module',
      module,
      options: opts.options ?? {},
      filter: { sources: [], services: [], event_types: [], resource_types: [] },
    },
    {
      name,
      configDir: opts.configDir ?? dirname(module),
      logger: opts.logger ?? pino({ level: 'silent' }),
    },
  );
}
