// Failures of a command that are not configuration errors, with the exit code they end in.

/** An operation refused or failed for a reason the message explains; exit 1 unless said otherwise. */
export class CommandError extends Error {
  override name = 'CommandError';
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

/** Stopped by SIGINT/SIGTERM before anything was written: exit 130, as shells report Ctrl-C. */
export class InterruptedError extends CommandError {
  override name = 'InterruptedError';
  constructor(message: string) {
    super(message, 130);
  }
}
