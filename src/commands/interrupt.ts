// Ctrl-C for the one-shot commands that can run for a while (status --watch, cursor reset --to
// latest): the first SIGINT/SIGTERM asks the work to stop at its next safe point; a second one
// ends the process at once.

/** Runs `work` with a signal that aborts on SIGINT/SIGTERM; resolves with whether it did. */
export async function untilInterrupted<T>(
  work: (interrupted: AbortSignal) => Promise<T>,
): Promise<{ value: T; interrupted: boolean }> {
  const controller = new AbortController();
  const onSignal = () => {
    if (controller.signal.aborted) process.exit(130);
    controller.abort(new Error('interrupted'));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const value = await work(controller.signal);
    return { value, interrupted: controller.signal.aborted };
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
