import type { Logger } from 'pino';
import { defaultConfigPath, loadConfigFile } from '../config/load.js';
import { collectSecrets } from '../config/redact.js';
import type { LoadedConfig } from '../config/types.js';
import { createLogger } from '../observability/logger.js';

export interface GlobalOptions {
  config?: string;
  pretty?: boolean;
}

/** Every command validates the config the same way before doing anything. */
export function loadForCommand(opts: GlobalOptions): { loaded: LoadedConfig; logger: Logger } {
  const loaded = loadConfigFile(opts.config ?? defaultConfigPath(process.env), process.env);
  const logger = createLogger({
    level: loaded.config.log.level,
    pretty: opts.pretty ?? process.stdout.isTTY === true,
    secrets: collectSecrets(loaded.config),
  });
  return { loaded, logger };
}
