// An admin API over a real queue driver (no daemon, no upstream): two sources, a sink `hook` that
// refuses every change until healed (so its changes become dead letters) and a sink `file` that
// takes everything; the admin listener started in-process on a loopback port with a write and a
// read token. Shared by the contract suite (both drivers) and the authorization tests.
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { watchActivity, type ActivityLog } from '../../src/admin/activity.js';
import type { AdminContext } from '../../src/admin/api.js';
import { startAdminServer } from '../../src/admin/server.js';
import { readAdminTokens } from '../../src/admin/tokens.js';
import { validateConfig } from '../../src/config/load.js';
import type { FeedsyncConfig } from '../../src/config/types.js';
import type { Change } from '../../src/core/change.js';
import { NeverError } from '../../src/core/errors.js';
import { PipelineEvents } from '../../src/core/events.js';
import type { HeldLease, QueueDriver } from '../../src/queue/driver.js';
import { openQueueDriver } from '../../src/queue/drivers.js';
import { makeChange } from '../../src/testing/make-change.js';
import { tempDir, waitFor } from '../support/harness.js';
import { RecordingSink } from '../queue/support.js';

export interface AdminHarness {
  /** The `queue:` block for the driver under test, isolated from other tests. */
  queue(): Record<string, unknown>;
}

export const SOURCES = ['alpha', 'beta'] as const;

export function adminConfig(dir: string, queue: Record<string, unknown>): FeedsyncConfig {
  return validateConfig(
    {
      store: { path: join(dir, 'store.db') },
      queue: { attempts: 2, backoff_ms: 5, max_backoff_ms: 20, concurrency: 4, ...queue },
      sources: SOURCES.map((name) => ({
        name,
        service: 'scheduling',
        base_url: `http://127.0.0.1:9/${name}`,
        username: 'u',
        password: 'the-source-password',
      })),
      sinks: ['hook', 'file'].map((name) => ({ name, type: 'jsonl', path: join(dir, `${name}.jsonl`) })),
      http: { host: '127.0.0.1', port: 0 },
      admin: { enabled: true, port: 0, token_file: 'write.token', read_token_file: 'read.token' },
    },
    { dir },
  );
}

export interface AdminFixture {
  config: FeedsyncConfig;
  /** Where the config, its token files and the store are. */
  dir: string;
  driver: QueueDriver;
  url: string;
  writeToken: string;
  readToken: string;
  /** The changes `hook` refused, by source, committed in this order. */
  dead: Change[];
  hook: RecordingSink;
  file: RecordingSink;
  registry: Registry;
  /** The admin server's log lines (pino JSON). */
  logs: Record<string, unknown>[];
  heal(): void;
  /** Stops delivery and closes the driver (the sources' leases with it). Idempotent. */
  close(): Promise<void>;
}

/** Errors `hook` answers with, by event type of the change; one quotes a URL with credentials. */
export const HOOK_ERRORS: Record<string, string> = {
  job_failed: 'receiver answered 500 Internal Server Error',
  '<img src=x onerror=alert(1)>': 'Bad Gateway from https://bob:hunter2@receiver.example/hook',
  title_updated: 'TIMEOUT waiting for the receiver',
};

export async function openAdminFixture(harness: AdminHarness): Promise<AdminFixture> {
  const dir = tempDir('feedsync-admin-');
  const writeToken = randomBytes(24).toString('base64url');
  const readToken = randomBytes(24).toString('base64url');
  writeFileSync(join(dir, 'write.token'), `${writeToken}\n`);
  writeFileSync(join(dir, 'read.token'), readToken);
  const config = adminConfig(dir, harness.queue());
  let healed = false;
  const hook = new RecordingSink({
    fail: (c) => (healed ? undefined : new NeverError(HOOK_ERRORS[c.event_type] ?? 'refused')),
  });
  const file = new RecordingSink();
  const events = new PipelineEvents();
  const driver = await openQueueDriver({
    config,
    mode: 'run',
    sinks: [
      { name: 'hook', sink: hook },
      { name: 'file', sink: file },
    ],
    events,
    logger: pino({ level: 'silent' }),
  });
  const { producer, delivery, leases, sourceState } = driver;
  if (!producer || !delivery || !leases || !sourceState) throw new Error('driver lacks its run-mode parts');
  const held = new Map<string, HeldLease>();
  for (const source of SOURCES) {
    const lease = await leases.acquire(source, new AbortController().signal, () => undefined);
    if (!lease) throw new Error(`no lease on ${source}`);
    held.set(source, lease);
  }
  const activity = watchActivity(events, ['hook', 'file']);
  await delivery.start();

  // alpha: three job_failed; beta: two with a hostile event type, one title_updated.
  const dead = [
    ...[1, 2, 3].map((i) => makeChange({ source: 'alpha', event_id: i, event_type: 'job_failed' })),
    ...[1, 2].map((i) =>
      makeChange({
        source: 'beta',
        event_id: i,
        event_type: '<img src=x onerror=alert(1)>',
        subject: { resource_type: 'title', id: i, name: 'x</script><script>alert(1)</script>' },
      }),
    ),
    makeChange({ source: 'beta', event_id: 3, event_type: 'title_updated' }),
  ];
  for (const source of SOURCES)
    await producer.commitPage({
      source,
      changes: dead.filter((c) => c.source === source),
      cursor: 3,
      seenAbove: [],
    });
  await waitFor(
    async () =>
      (await driver.admin.counts()).hook?.dead === dead.length && file.delivered.length === dead.length,
    20_000,
    'hook to dead-letter every change and file to take them all',
  );

  const server = await serveAdmin(
    config,
    dir,
    () => Promise.resolve({ sourceState, leases, admin: driver.admin, positions: driver.positions }),
    activity,
  );
  let closed: Promise<void> | undefined;
  return {
    config,
    dir,
    driver,
    url: server.url,
    writeToken,
    readToken,
    dead,
    hook,
    file,
    registry: server.registry,
    logs: server.logs,
    heal: () => void (healed = true),
    close: () =>
      (closed ??= (async () => {
        activity.close();
        await server.close();
        for (const lease of held.values()) await lease.release().catch(() => undefined);
        await delivery.stop(2_000);
        await driver.close();
      })()),
  };
}

export interface ServedAdmin {
  url: string;
  registry: Registry;
  logs: Record<string, unknown>[];
  close(): Promise<void>;
}

/** The admin listener on a loopback port over these ops, its log lines and metrics collected. */
export async function serveAdmin(
  config: FeedsyncConfig,
  dir: string,
  ops: AdminContext['ops'],
  activity?: ActivityLog,
): Promise<ServedAdmin> {
  const registry = new Registry();
  const logs: Record<string, unknown>[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void logs.push(JSON.parse(line)) });
  const server = await startAdminServer({
    config,
    ops,
    activity,
    host: '127.0.0.1',
    port: 0,
    tokens: readAdminTokens(config.admin, dir),
    registry,
    logger,
  });
  return { url: `http://127.0.0.1:${server.port}`, registry, logs, close: () => server.close() };
}

/** A request to the fixture's admin API with the given token (or none), JSON in and out. */
export async function call(
  f: Pick<AdminFixture, 'url'>,
  token: string | undefined,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: any; headers: Headers; text: string }> {
  const res = await fetch(`${f.url}${path}`, {
    method,
    headers: {
      ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...headers,
    },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: res.status, body: parsed, headers: res.headers, text };
}
