// A sink call that never settles (a module sink awaiting a promise nobody resolves, a client with
// no timeout of its own) would hold its delivery slot — a lane, a shard — forever. Every call gets
// `queue.delivery_timeout_ms`; past it the delivery counts as failed (retried later, an attempt
// spent) and the slot is free. The call itself cannot be cancelled from outside: its
// `context.signal` aborts at the deadline, and a sink that honours it (stops its request, rolls
// back) never overlaps the retry; one that completes after all may deliver the change twice, and
// the retry may run while it still works on the subject — said in a log line.
import type { Logger } from 'pino';
import type { Change } from '../core/change.js';
import { errorMessage, RetryLaterError } from '../core/errors.js';
import type { DeliveryContext, Sink } from './sink.js';

export function withDeliveryDeadline(sink: Sink, name: string, timeoutMs: number, logger: Logger): Sink {
  const bounded = <T>(start: (signal: AbortSignal) => Promise<T>, what: string): Promise<T> => {
    const abort = new AbortController();
    // A sink that throws synchronously or returns a plain value still yields one promise.
    const call = (async () => start(abort.signal))();
    let timer: NodeJS.Timeout | undefined;
    let late = false;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        late = true;
        abort.abort(new Error(`queue.delivery_timeout_ms (${timeoutMs} ms) passed`));
        reject(
          new RetryLaterError(
            `sink "${name}": ${what} did not settle within queue.delivery_timeout_ms (${timeoutMs} ms)`,
          ),
        );
      }, timeoutMs);
      timer.unref();
    });
    call.then(
      () =>
        late &&
        logger.warn(
          { sink: name, call: what },
          'a sink call finished after its deadline; the change may be delivered twice',
        ),
      (err: unknown) =>
        late &&
        logger.warn(
          { sink: name, call: what, err: errorMessage(err) },
          'a sink call failed after its deadline',
        ),
    );
    return Promise.race([call, deadline]).finally(() => clearTimeout(timer));
  };
  const out: Sink = {
    deliver: (change: Change, context?: DeliveryContext) =>
      bounded((signal) => sink.deliver(change, { ...context, signal }), `deliver(${change.key})`),
    close: () => sink.close(),
  };
  if (sink.deliverBatch) {
    const batch = sink.deliverBatch.bind(sink);
    out.deliverBatch = (changes: Change[], context?: DeliveryContext) =>
      bounded(
        (signal) => batch(changes, { ...context, signal }),
        `deliverBatch(${changes.length} changes from ${changes[0]?.key ?? '-'})`,
      );
  }
  if (sink.healthy) out.healthy = sink.healthy.bind(sink);
  return out;
}
