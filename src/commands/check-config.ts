// `feedsync check-config`: validate the config and show what feedsync will actually use
// (defaults filled in, ${ENV} and *_file resolved), with every secret redacted.
import { stringify } from 'yaml';
import { ConfigError } from '../core/errors.js';
import { loadConfigFile } from '../config/load.js';
import { redactConfig } from '../config/redact.js';

/**
 * Returns the exit code: 0 with the effective config printed as YAML to `out`, or 2 with one
 * line per problem printed to `err` (defaults to `out`). Anything other than a ConfigError is a
 * bug and is rethrown for the caller's runtime-failure path (exit 1).
 */
export function checkConfig(
  file: string,
  env: NodeJS.ProcessEnv,
  out: (s: string) => void,
  err: (s: string) => void = out,
): number {
  try {
    const loaded = loadConfigFile(file, env);
    const header = `# effective configuration from ${loaded.file ?? file} (secrets redacted)\n`;
    out(header + stringify(redactConfig(loaded.config), { lineWidth: 0 }));
    return 0;
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    const lines = error.message.split('\n');
    err(`invalid configuration (${file}):\n${lines.map((l) => `  ${l}`).join('\n')}\n`);
    return 2;
  }
}
