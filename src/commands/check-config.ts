// `feedsync check-config`: validate the config and show what feedsync will actually use
// (defaults filled in, ${ENV} and *_file resolved), with every secret redacted.
import { stringify } from 'yaml';
import { readAdminTokens } from '../admin/tokens.js';
import { ConfigError } from '../core/errors.js';
import { loadConfigFile } from '../config/load.js';
import { redactConfig } from '../config/redact.js';

/** `feedsync check-config --json`: the shapes docs/cli.md documents. */
export type CheckConfigJson =
  { valid: true; file: string; config: unknown } | { valid: false; file: string; errors: string[] };

/**
 * Returns the exit code: 0 with the effective config printed to `out` (YAML, or JSON with
 * opts.json), or 2 with one line per problem printed to `err` (defaults to `out`); with opts.json
 * the problems go to `out` as one JSON document. Anything other than a ConfigError is a bug and
 * is rethrown for the caller's runtime-failure path (exit 1).
 */
export function checkConfig(
  file: string,
  env: NodeJS.ProcessEnv,
  out: (s: string) => void,
  err: (s: string) => void = out,
  opts: { json?: boolean } = {},
): number {
  try {
    const loaded = loadConfigFile(file, env);
    // The admin tokens are read at start-up, not with the config: check them as the start would.
    if (loaded.config.admin.enabled) readAdminTokens(loaded.config.admin, loaded.dir);
    const effective = redactConfig(loaded.config);
    const from = loaded.file ?? file;
    if (opts.json)
      out(JSON.stringify({ valid: true, file: from, config: effective } satisfies CheckConfigJson, null, 2));
    else
      out(
        `# effective configuration from ${from} (secrets redacted)\n${stringify(effective, { lineWidth: 0 })}`,
      );
    return 0;
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    const lines = error.message.split('\n');
    if (opts.json)
      out(JSON.stringify({ valid: false, file, errors: lines } satisfies CheckConfigJson, null, 2));
    else err(`invalid configuration (${file}):\n${lines.map((l) => `  ${l}`).join('\n')}\n`);
    return 2;
  }
}
