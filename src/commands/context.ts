import type { Logger } from 'pino';
import { config as configureZod } from 'zod';
import { defaultConfigPath, loadConfigFile } from '../config/load.js';
import { collectSecrets } from '../config/redact.js';
import type { LoadedConfig } from '../config/types.js';
import { createLogger } from '../observability/logger.js';

// zod compiles each object schema into a function on its first parse, which pays off only when a
// schema parses many values; the config is parsed once per command (~4 ms of start-up saved).
// Nothing on the event path uses zod.
configureZod({ jitless: true });

export interface GlobalOptions {
  config?: string;
  pretty?: boolean;
  /** `--log-level`: wins over `log.level` of the config. */
  logLevel?: string;
}

/** Every command validates the config the same way before doing anything. */
export function loadForCommand(opts: GlobalOptions): { loaded: LoadedConfig; logger: Logger } {
  const loaded = loadConfigFile(opts.config ?? defaultConfigPath(process.env), process.env);
  // Overriding the config itself, so whatever reads log.level later sees the same level.
  if (opts.logLevel) loaded.config.log.level = opts.logLevel as typeof loaded.config.log.level;
  const logger = createLogger({
    level: loaded.config.log.level,
    pretty: opts.pretty ?? process.stdout.isTTY === true,
    secrets: collectSecrets(loaded.config),
  });
  return { loaded, logger };
}
