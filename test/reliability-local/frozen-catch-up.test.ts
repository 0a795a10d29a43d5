// A `run` frozen past its store lease in the middle of a catch-up step that queues no row (an
// `event_types`-filtered sink whose page holds no matching event) must write nothing once resumed:
// such a step writes only the per-sink position tables, which the store fence once left out, so
// the frozen run could move the sink back onto the shared stream over the new owner's head and
// book the events the new owner had passed for it as "lost upstream".
//
// Real processes, a loopback proxy in front of the sandbox to place the freeze:
//  1. a deployment reads the whole feed (30 events, one page) with one sink, `file`;
//  2. a sink `filtered` is added (start_from: earliest, one event type none of the 30 has). The
//     run A starts its catch-up: the proxy reads the page for it at once (no matching event, short:
//     the page rejoins the sink) but holds the answer; A is frozen (SIGSTOP);
//  3. run B takes the store over; its own catch-up reads are refused (404) for now, so the sink
//     stays behind while B's shared poll passes new events of that type for it;
//  4. A gets its answer and is resumed (SIGCONT): it must write nothing and exit 1;
//  5. B's catch-up reads the feed again: every matching change reaches `filtered` exactly once,
//     nothing is booked lost, and the sink is back on the shared stream.
//
// A resumed process runs its overdue timers before its pending I/O, so here A's lease renewal
// finds the takeover before A's page is in hand, and A stops without trying the commit. A process
// frozen between reading the page and committing it (a GC pause, a stop inside the step) does try
// it: test/queue-local/store-fence.test.ts commits such a step against a superseded lease, and it
// is that test which fails without the fence on the position tables.
import Database from 'better-sqlite3';
import { createServer, request, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { rawConfig, readJsonl, tempDir, waitFor } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig } from '../support/process.js';
import { countKeys, echoPrefix, SEED, sleep, startRun } from './support.js';

const BACKLOG = 30;
const TTL_MS = 3000;

describe(`a run frozen during a filtered catch-up (RELIABILITY_SEED=${SEED})`, () => {
  let sandbox: Sandbox;
  let proxy: CatchUpProxy;
  beforeAll(async () => {
    sandbox = await startSandbox({ seed: SEED, backlog: BACKLOG });
    proxy = await startCatchUpProxy(new URL(sandbox.schedulingBaseUrl));
  });
  afterAll(async () => {
    await killAllCli();
    await proxy?.close();
    await sandbox?.close();
  });

  it(
    'writes nothing once resumed: nothing booked lost, every matching change delivered once',
    { timeout: 120_000 },
    async () => {
      const type = await typeNotIn(sandbox.events('scheduling').map((e) => e.event_type));
      const dir = tempDir('feedsync-frozen-catchup-');
      const file = join(dir, 'file.jsonl');
      const filtered = join(dir, 'filtered.jsonl');
      const storePath = join(dir, 'feedsync.db');
      const config = (sinks: Record<string, unknown>[]) => {
        const raw = rawConfig(sandbox, dir, {
          services: ['scheduling'],
          sinks,
          queue: { lease_ttl_ms: TTL_MS },
          source: { timeout_ms: 60_000 },
        });
        // Through the proxy; subject links name the sandbox itself.
        Object.assign((raw.sources as Record<string, unknown>[])[0]!, {
          base_url: proxy.url,
          allowed_origins: [new URL(sandbox.schedulingBaseUrl).origin],
        });
        raw.log = { level: 'info' };
        return { configPath: writeConfig(dir, raw) };
      };
      const fileSink = { name: 'file', type: 'jsonl', path: file };
      const keysOf = (pred: (t: string) => boolean) =>
        sandbox
          .events('scheduling')
          .filter((e) => pred(e.event_type))
          .map((e) => `scheduling:${e.id}`);

      // 1. The whole feed, one sink.
      const setup = await startRun(config([fileSink]));
      await waitFor(() => readJsonl(file).length >= BACKLOG, 30_000, 'the first run delivers the backlog');
      expect(await setup.stop(8000)).toEqual({ code: 0, signal: null });

      // 2. A sink added, back-filled from the start; its first catch-up page is held, and A frozen.
      const files = config([
        fileSink,
        {
          name: 'filtered',
          type: 'jsonl',
          path: filtered,
          start_from: 'earliest',
          filter: { event_types: [type] },
        },
      ]);
      proxy.arm();
      const a = await startRun(files);
      await waitFor(() => proxy.holding, 15_000, 'run A reads its first catch-up page');
      a.signal('SIGSTOP');

      // 3. B takes over; its catch-up is refused for now while its shared poll passes matching events.
      const b = spawnCli(['run'], { config: files.configPath, echo: echoPrefix('run B') });
      await waitFor(() => proxy.refused > 0, 30_000, 'run B owns the store and tries its catch-up');
      for (let i = 0; i < 50 && keysOf((t) => t === type).length < 3; i++) sandbox.generate('scheduling', 20);
      const matching = keysOf((t) => t === type);
      expect(matching.length, `seed ${SEED}: events of type ${type} generated`).toBeGreaterThanOrEqual(3);
      const all = keysOf(() => true);
      await waitFor(
        () => new Set(readJsonl(file).map((c) => c.key)).size >= all.length,
        30_000,
        'run B delivers the new events to file',
      ).catch((err: Error) => {
        const got = new Set(readJsonl(file).map((c) => c.key)).size;
        throw new Error(`${err.message}: ${got} of ${all.length}\n${b.text().slice(-3000)}`);
      });
      expect(lagState(storePath).lagging, 'the sink still lags while its catch-up is refused').toBe(1);

      // 4. A resumes with its page in hand: it must write nothing.
      proxy.release();
      await sleep(200);
      a.signal('SIGCONT');
      const exit = await a.waitForExit(15_000);
      expect(exit.code, a.text().slice(-3000)).toBe(1);

      // 5. B catches the sink up: every matching change once, nothing lost, back on the shared stream.
      proxy.pass();
      await waitFor(
        () => {
          const s = lagState(storePath);
          return s.lagging === 0 && new Set(readJsonl(filtered).map((c) => c.key)).size >= matching.length;
        },
        30_000,
        `seed ${SEED}: ${matching.length} changes of ${type} reach filtered and it rejoins`,
      ).catch((err: Error) => {
        const state = JSON.stringify({ ...lagState(storePath), delivered: readJsonl(filtered).length });
        throw new Error(`${err.message}; ${state}\n${b.text().slice(-3000)}`);
      });
      await sleep(300);
      const got = countKeys(readJsonl(filtered));
      expect([...got.keys()].sort()).toEqual([...matching].sort());
      expect([...got].filter(([, n]) => n > 1)).toEqual([]);
      expect(lagState(storePath)).toEqual({ lagging: 0, lost: 0 });
      expect(await b.stop(8000)).toEqual({ code: 0, signal: null });
    },
  );
});

/** A scheduling event type, frequent in a larger backlog of the same seed, that `present` lacks. */
async function typeNotIn(present: string[]): Promise<string> {
  const preview = await startSandbox({ seed: SEED, backlog: 600 });
  try {
    const counts = new Map<string, number>();
    for (const e of preview.events('scheduling'))
      if (!present.includes(e.event_type)) counts.set(e.event_type, (counts.get(e.event_type) ?? 0) + 1);
    const best = [...counts].sort((x, y) => y[1] - x[1] || x[0].localeCompare(y[0]))[0];
    if (!best) throw new Error(`seed ${SEED}: every event type is in the first ${BACKLOG} events`);
    return best[0];
  } finally {
    await preview.close();
  }
}

function lagState(storePath: string): { lagging: number; lost: number } {
  const db = new Database(storePath, { readonly: true, fileMustExist: true });
  try {
    return {
      lagging: db
        .prepare(`SELECT COUNT(*) FROM lagging_sinks WHERE sink = 'filtered'`)
        .pluck()
        .get() as number,
      lost: db
        .prepare(`SELECT IFNULL(SUM(lost_count), 0) FROM known_sinks WHERE sink = 'filtered'`)
        .pluck()
        .get() as number,
    };
  } finally {
    db.close();
  }
}

interface CatchUpProxy {
  url: string;
  /** A catch-up read's answer is waiting to be released. */
  readonly holding: boolean;
  /** Catch-up reads answered 404. */
  readonly refused: number;
  /** The next catch-up read (from the feed's start) is read upstream at once, its answer held; later ones are refused. */
  arm(): void;
  /** Sends the held answer. */
  release(): void;
  /** Every request passes again. */
  pass(): void;
  close(): Promise<void>;
}

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** Forwards to the sandbox service at `target`; a catch-up read is a feed read with newer_than=0. */
async function startCatchUpProxy(target: URL): Promise<CatchUpProxy> {
  let mode: 'pass' | 'hold' | 'refuse' = 'pass';
  let held: { res: ServerResponse; answer: Answer } | undefined;
  let refused = 0;
  const forward = (path: string, headers: IncomingHttpHeaders) =>
    new Promise<Answer>((resolve, reject) => {
      const req = request(
        {
          host: target.hostname,
          port: target.port,
          path,
          method: 'GET',
          headers: { ...headers, host: target.host },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () =>
            resolve({ status: res.statusCode ?? 502, headers: res.headers, body: Buffer.concat(chunks) }),
          );
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.end();
    });
  const send = (res: ServerResponse, a: Answer) => {
    const headers = { ...a.headers };
    delete headers['transfer-encoding'];
    delete headers.connection;
    res.writeHead(a.status, { ...headers, 'content-length': String(a.body.length) });
    res.end(a.body);
  };
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://proxy');
    const catchUp = url.pathname.endsWith('/api/events') && url.searchParams.get('newer_than') === '0';
    if (catchUp && mode === 'refuse') {
      refused++;
      res.writeHead(404, { 'content-length': '0' }).end();
      return;
    }
    forward(req.url ?? '/', req.headers).then(
      (answer) => {
        // Only an answered read is held (a Digest challenge goes through): its page is as of now.
        if (catchUp && mode === 'hold' && answer.status === 200) {
          held = { res, answer };
          mode = 'refuse';
        } else send(res, answer);
      },
      () => res.writeHead(502, { 'content-length': '0' }).end(),
    );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    // The sandbox's path kept: a Digest answer names the path the client asked for.
    url: `http://127.0.0.1:${port}${target.pathname.replace(/\/$/, '')}`,
    get holding() {
      return held !== undefined;
    },
    get refused() {
      return refused;
    },
    arm: () => void (mode = 'hold'),
    release() {
      if (held) send(held.res, held.answer);
      held = undefined;
    },
    pass: () => void (mode = 'pass'),
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
