// The ceiling for the bullmq driver: no-op jobs through the same Redis, added with addBulk and
// processed by Workers that do nothing, with the concurrency feedsync's two `work` processes have.
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';

export interface BareBullmqResult {
  jobs: number;
  workers: number;
  concurrency: number;
  addSeconds: number;
  processSeconds: number;
  addPerSecond: number;
  processPerSecond: number;
}

export async function measureBareBullmq(
  redisUrl: string,
  opts: { jobs: number; workers: number; concurrency: number; timeoutMs: number },
): Promise<BareBullmqResult> {
  const connection = new Redis(redisUrl, { maxRetriesPerRequest: null });
  const name = `bare-${Date.now()}`;
  const queue = new Queue(name, { connection, prefix: '{bench}' });
  const workers: Worker[] = [];
  const workerConnections: Redis[] = [];
  try {
    const addStart = performance.now();
    for (let i = 0; i < opts.jobs; i += 1000) {
      const n = Math.min(1000, opts.jobs - i);
      await queue.addBulk(
        Array.from({ length: n }, (_, k) => ({
          name: 'noop',
          data: { i: i + k },
          opts: { jobId: `j${i + k}`, removeOnComplete: { count: 10_000 } },
        })),
      );
    }
    const addSeconds = (performance.now() - addStart) / 1000;

    let done = 0;
    let finish: () => void = () => undefined;
    const allDone = new Promise<void>((resolve) => (finish = resolve));
    const processStart = performance.now();
    for (let w = 0; w < opts.workers; w++) {
      const workerConnection = new Redis(redisUrl, { maxRetriesPerRequest: null });
      workerConnections.push(workerConnection);
      const worker = new Worker(name, async () => undefined, {
        connection: workerConnection,
        prefix: '{bench}',
        concurrency: opts.concurrency,
      });
      worker.on('completed', () => {
        if (++done >= opts.jobs) finish();
      });
      workers.push(worker);
    }
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<void>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`bare BullMQ: ${done}/${opts.jobs} jobs after ${opts.timeoutMs} ms`)),
        opts.timeoutMs,
      );
    });
    await Promise.race([allDone, timedOut]).finally(() => clearTimeout(timer));
    const processSeconds = (performance.now() - processStart) / 1000;
    return {
      jobs: opts.jobs,
      workers: opts.workers,
      concurrency: opts.concurrency,
      addSeconds,
      processSeconds,
      addPerSecond: opts.jobs / addSeconds,
      processPerSecond: opts.jobs / processSeconds,
    };
  } finally {
    await Promise.all(workers.map((w) => w.close()));
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    // Connections passed in are not closed by Worker/Queue.close().
    for (const c of [...workerConnections, connection]) c.disconnect();
  }
}
