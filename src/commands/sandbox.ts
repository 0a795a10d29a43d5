import { startSandbox, type SandboxOptions } from '../sandbox/index.js';

/**
 * `feedsync sandbox`: both simulated services on 127.0.0.1. Prints ONE JSON line on stdout once
 * ready (URLs, credentials, control URL) so scripts can find it; everything else goes to stderr.
 */
export async function sandboxCommand(opts: SandboxOptions): Promise<void> {
  const sandbox = await startSandbox(opts);
  process.stdout.write(`${JSON.stringify(sandbox.readyLine())}\n`);
  process.stderr.write(
    `feedsync sandbox: scheduling ${sandbox.schedulingBaseUrl}, workflow ${sandbox.workflowBaseUrl}, control ${sandbox.controlUrl}\n`,
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
