import { parseDialectOption, type DialectName, type DialectSpec } from '../sandbox/dialect.js';
import { startSandbox, type SandboxOptions } from '../sandbox/index.js';

/** `--dialect NAME`, `--dialect-option k=v`… and `--digest-algorithms A,B` as one dialect spec. */
export function sandboxDialect(name: string, options: string[], digestAlgorithms?: string): DialectSpec {
  const spec: Record<string, unknown> = { profile: name as DialectName };
  for (const text of options) {
    const [key, value] = parseDialectOption(text);
    spec[key] = value;
  }
  if (digestAlgorithms !== undefined)
    spec.digestAlgorithms = parseDialectOption(`digestAlgorithms=${digestAlgorithms}`)[1];
  return spec as DialectSpec;
}

/**
 * `feedsync sandbox`: both simulated services on 127.0.0.1. Prints ONE JSON line on stdout once
 * ready (URLs, credentials, control URL) so scripts can find it; everything else goes to stderr.
 */
export async function sandboxCommand(opts: SandboxOptions): Promise<void> {
  const sandbox = await startSandbox(opts);
  process.stdout.write(`${JSON.stringify(sandbox.readyLine())}\n`);
  const d = sandbox.dialect();
  process.stderr.write(
    `feedsync sandbox: scheduling ${sandbox.schedulingBaseUrl}, workflow ${sandbox.workflowBaseUrl}, control ${sandbox.controlUrl}; ` +
      `dialect ${typeof opts.dialect === 'object' ? (opts.dialect.profile ?? 'default') : (opts.dialect ?? 'default')}, Digest ${d.digestAlgorithms.join(' ')}\n`,
  );
  let closing = false;
  const stop = () => {
    if (closing) process.exit(1);
    closing = true;
    void sandbox.close().then(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
