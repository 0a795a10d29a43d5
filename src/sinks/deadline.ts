// A sink call that never settles (a module sink awaiting a promise nobody resolves, a client with
// no timeout of its own) would hold its delivery slot — a lane, a shard — forever. Every call gets
// `queue.delivery_timeout_ms`; past it the delivery counts as failed (retried later, an attempt
// spent) and the slot is free. The call itself cannot be cancelled: if it completes after all, the
// change may reach the sink twice (the retry), which is said in a log line.
import type { Logger } from 'pino';
import type { Change } from '../core/change.js';
import { errorMessage, RetryLaterError } from '../core/errors.js';
import type { DeliveryContext, Sink } from './sink.js';

export function withDeliveryDeadline(sink: Sink, name: string, timeoutMs: number, logger: Logger): Sink {
  const bounded = <T>(start: () => Promise<T>, what: string): Promise<T> => {
    // A sink that throws synchronously or returns a plain value still yields one promise.
    const call = (async () => start())();
    let timer: NodeJS.Timeout | undefined;
    let late = false;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        late = true;
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
      bounded(() => sink.deliver(change, context), `deliver(${change.key})`),
    close: () => sink.close(),
  };
  if (sink.deliverBatch) {
    const batch = sink.deliverBatch.bind(sink);
    out.deliverBatch = (changes: Change[], context?: DeliveryContext) =>
      bounded(
        () => batch(changes, context),
        `deliverBatch(${changes.length} changes from ${changes[0]?.key ?? '-'})`,
      );
  }
  if (sink.healthy) out.healthy = sink.healthy.bind(sink);
  return out;
}
