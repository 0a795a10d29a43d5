import { flushCompileCache } from 'node:module';
import { withDeadline } from '../backoff.js';
import { boundHeapGrowth } from '../heap.js';
import { StartAborted, startDaemon, type DaemonMode } from '../daemon.js';
import { handleShutdownSignals } from '../signals.js';
import { version } from '../version.js';
import { loadForCommand, type GlobalOptions } from './context.js';

/** `feedsync run | poll | work`: start, then stop gracefully on the first SIGTERM/SIGINT. */
export async function daemonCommand(mode: DaemonMode, opts: GlobalOptions): Promise<void> {
  boundHeapGrowth();
  const { loaded, logger } = loadForCommand(opts);
  const budget = loaded.config.shutdown_timeout_ms + 2000;
  const stopStarting = new AbortController();
  const starting = startDaemon({
    config: loaded.config,
    configDir: loaded.dir,
    mode,
    logger,
    version,
    signal: stopStarting.signal,
  });
  // Signals are handled from the first moment: a SIGTERM while the queue is not open yet (Redis
  // unreachable or refusing) gives up the start at once; one during the rest of start-up waits for
  // it within the budget, then stops what was started.
  handleShutdownSignals(() => {
    stopStarting.abort();
    return stopWithin(
      starting.then(
        (daemon) => daemon.stop(),
        (err: unknown) => {
          if (!(err instanceof StartAborted)) throw err;
        },
      ),
      budget,
    );
  }, logger);
  let daemon;
  try {
    daemon = await starting;
  } catch (err) {
    // Only a shutdown signal aborts the start; its handler exits 0.
    if (err instanceof StartAborted) return;
    throw err;
  }
  // Another process owns what this one wrote (it was frozen past its lease): stop writing, exit 1.
  void daemon.failed.then(async () => {
    process.exitCode = 1;
    await stopWithin(daemon.stop(), budget).catch(() => process.exit(1));
  });
  // Node writes the compile cache at exit; a daemon that is killed rather than stopped would never
  // write it. Everything start-up needs is loaded by now.
  flushCompileCache();
}

/** `stop` settled within `ms`, or a rejection naming the budget: the signal handler exits 1. */
async function stopWithin(stop: Promise<void>, ms: number): Promise<void> {
  if (
    (await withDeadline(
      stop.then(() => true),
      ms,
    )) !== true
  )
    throw new Error(`shutdown took longer than ${ms} ms`);
}
