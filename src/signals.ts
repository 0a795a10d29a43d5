import type { Logger } from 'pino';

/**
 * The one place signals are handled. First SIGTERM/SIGINT: graceful `stop()` (time-boxed by the
 * caller), then exit 0. Second one: exit at once with 1 — the operator asked twice.
 */
export function handleShutdownSignals(stop: () => Promise<void>, logger: Logger): void {
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    logger.info({ signal }, 'stopping gracefully');
    stop().then(
      () => process.exit(0),
      (err) => {
        logger.error({ err: (err as Error).message }, 'graceful stop failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
}
