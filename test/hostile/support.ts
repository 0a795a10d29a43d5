// The hostile-upstream suite's tools (issue #19 item 6): a loopback upstream that enforces Digest
// auth like the specs and answers each request from a scenario that can switch from hostile to
// healed at run time, recording every request (and every body byte it wrote); a runner that starts
// the real daemon (`node dist/cli.js run`) against it with the local queue and a jsonl sink; RSS
// and /healthz samplers; a /metrics reader. Assertions rest on facts from outside the daemon: the
// bytes and requests this server counted, /proc figures, the jsonl file, the daemon's log lines and
// its /metrics text.
//
// HOSTILE_ECHO=1 echoes the daemon's output; HOSTILE_REPORT=<dir> writes one JSON summary per run
// (RSS, health, poll errors) for a human reading a failed run; HOSTILE_KEEP=1 keeps the run
// directories (store, config, jsonl), removed after each test otherwise.
import { once } from 'node:events';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { join } from 'node:path';
import { createGzip } from 'node:zlib';
import { expect } from 'vitest';
import type { Change } from '../../src/core/change.js';
import { DigestGuard, type DigestSettings } from '../../src/sandbox/digest-auth.js';
import { parseSamples, type Sample } from '../observability/prom-text.js';
import { readJsonl, tempDir } from '../support/harness.js';
import { spawnCli, writeConfig, type CliProcess, type LogEntry } from '../support/process.js';

export const USERNAME = 'hostile-user';
/** Distinctive, so a leak anywhere in the output is found by a plain substring search. */
export const PASSWORD = 'pw-Hostile-7f3e9c1d-secret';
export const MiB = 1024 * 1024;
/** The contract's default `max_body_bytes`. */
export const DEFAULT_MAX_BODY = 8 * MiB;
/** Peak RSS allowed to the daemon in every scenario. */
export const RSS_LIMIT_BYTES = 256 * MiB;
/** Above this the daemon is SIGKILLed at once: a product without limits must not take the machine down. */
const RSS_KILL_BYTES = 1536 * MiB;
export const HEALTH_MAX_LATENCY_MS = 1000;
/** A run is sampled at least this long (about 10 /healthz probes and 20 RSS samples). */
const MIN_OBSERVATION_MS = 1200;

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------
// Feed model: events in listing order, rendered as the specs' JSON or XML.

export type Service = 'scheduling' | 'workflow';

export interface EventSpec {
  id: number;
  type: string;
  /** A path on the upstream (`/api/...`), an absolute URL (any origin or scheme) or any text. */
  subject: string;
  /** ISO 8601; default: derived from the listing position, increasing in listing order. */
  timestamp?: string;
  changes?: string;
  /** Scheduling: embed the subject when the feed is asked to expand it (default true). */
  embed?: boolean;
}

const BASE_TIME = Date.UTC(2026, 10, 20, 10, 0, 0);

/** Events in listing order; timestamps follow that order unless an event sets its own. */
export class Feed {
  readonly events: EventSpec[];
  constructor(
    readonly service: Service,
    events: EventSpec[],
  ) {
    this.events = events.map((e, i) => ({
      ...e,
      timestamp: e.timestamp ?? new Date(BASE_TIME + i * 1000).toISOString(),
    }));
  }

  /** The first `limit` events listed with an id above `newerThan` (the specs' feed). */
  page(newerThan: number, limit = 50): EventSpec[] {
    return this.events.filter((e) => e.id > newerThan).slice(0, limit);
  }

  byId(id: number): EventSpec | undefined {
    return this.events.find((e) => e.id === id);
  }

  ids(): number[] {
    return this.events.map((e) => e.id);
  }
}

/** `count` events with consecutive ids from `first`, subjects shared by `subjects` resources. */
export function makeEvents(
  service: Service,
  first: number,
  count: number,
  opts: { subjects?: number; type?: (id: number) => string; subjectBase?: number } = {},
): EventSpec[] {
  const subjects = opts.subjects ?? 4;
  const base = opts.subjectBase ?? 500;
  return Array.from({ length: count }, (_, i) => {
    const id = first + i;
    const n = base + (i % subjects);
    return {
      id,
      type: opts.type?.(id) ?? (service === 'scheduling' ? 'title_updated' : 'job_updated'),
      subject: subjectPath(service, n),
      changes: 'name',
    };
  });
}

export function subjectPath(service: Service, n: number): string {
  return service === 'scheduling' ? `/api/titles/${n}` : `/api/work_areas/1/jobs/${n}`;
}

export function absolutize(link: string, origin: string): string {
  if (/^[a-z][a-z0-9+.-]*:/i.test(link)) return link;
  return link.startsWith('/') ? `${origin}${link}` : link;
}

/** The representation of a subject at `path` (its type and id read from the path). */
export function subjectResource(path: string, origin: string): Record<string, unknown> {
  const m = /\/([a-z_]+)s\/(\d+)$/.exec(path);
  const type = m?.[1] ?? 'thing';
  const id = Number(m?.[2] ?? 0);
  return { resource_type: type, id, name: `${type} ${id}`, self_link: `${origin}${path}` };
}

function eventJson(
  e: EventSpec,
  origin: string,
  service: Service,
  expandSubject: boolean,
): Record<string, unknown> {
  const link = absolutize(e.subject, origin);
  const out: Record<string, unknown> = {
    resource_type: 'event',
    id: e.id,
    event_type: e.type,
    timestamp: e.timestamp,
  };
  if (e.changes && e.type.endsWith('_updated')) out.changes = e.changes;
  out.self_link = `${origin}/api/events/${e.id}`;
  out.subject_link = link;
  if (service === 'scheduling' && expandSubject && e.embed !== false && !e.type.endsWith('_deleted')) {
    const { resource_type: _t, ...fields } = subjectResource(e.subject, origin);
    out.subject = { resource_type: 'subject', ...fields };
  }
  return out;
}

export function feedJson(
  events: EventSpec[],
  origin: string,
  service: Service,
  expandSubject = true,
): string {
  return JSON.stringify({
    resource_type: 'events',
    entries: events.map((e) => eventJson(e, origin, service, expandSubject)),
  });
}

const xmlEscape = (s: string) =>
  s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

export function feedXml(events: EventSpec[], origin: string, service: Service, expandSubject = true): string {
  const parts = ['<?xml version="1.0" encoding="UTF-8"?>\n<events type="array">'];
  for (const e of events) {
    const link = xmlEscape(absolutize(e.subject, origin));
    let subject = '';
    if (service === 'scheduling' && expandSubject && e.embed !== false && !e.type.endsWith('_deleted')) {
      const r = subjectResource(e.subject, origin);
      subject =
        `<subject><id type="integer">${r.id as number}</id><name>${xmlEscape(r.name as string)}</name>` +
        `<link rel="self" href="${xmlEscape(r.self_link as string)}"/></subject>`;
    }
    parts.push(
      `<event><id type="integer">${e.id}</id><event-type>${xmlEscape(e.type)}</event-type>` +
        `<timestamp type="datetime">${e.timestamp}</timestamp>` +
        (e.changes && e.type.endsWith('_updated') ? `<changes>${xmlEscape(e.changes)}</changes>` : '') +
        `<link rel="self" href="${origin}/api/events/${e.id}"/>` +
        (subject
          ? `<link rel="subject" href="${link}">${subject}</link>`
          : `<link rel="subject" href="${link}"/>`) +
        '</event>',
    );
  }
  parts.push('</events>');
  return parts.join('\n');
}

// ---------------------------------------------------------------------------------------------
// The hostile upstream.

export interface RecordedRequest {
  n: number;
  method: string;
  /** Path and query as received. */
  url: string;
  path: string;
  query: URLSearchParams;
  /** An Authorization header was sent. */
  authorization: boolean;
  /** It passed the Digest check (false: answered 401). */
  authenticated: boolean;
  /** The server's mode when the request arrived. */
  mode: string;
  status: number;
  /** Body bytes handed to the socket for this request. */
  bytes: number;
  startedAt: number;
  endedAt?: number;
  /** The connection closed before the response was complete (the client gave up). */
  cutShort: boolean;
}

export interface Reply {
  status?: number;
  headers?: Record<string, string | string[]>;
  /** A complete body (sent with Content-Length unless a header says otherwise). */
  body?: string | Buffer;
  /** A lazily produced body, sent chunked with backpressure; stops when the client goes away. */
  stream?: () => Iterable<Buffer> | AsyncIterable<Buffer>;
  /** Pause before each streamed chunk (slow-loris). */
  chunkDelayMs?: number;
}

export interface RouteContext {
  upstream: HostileUpstream;
  req: IncomingMessage;
  path: string;
  query: URLSearchParams;
  mode: string;
  origin: string;
  /** `Accept` asks for XML. */
  wantsXml: boolean;
}

export type Handler = (ctx: RouteContext) => Reply | Promise<Reply>;

/** Replaces the Digest check: a reply to send instead (e.g. a 401 with odd challenges), or undefined to go on. */
export type AuthOverride = (ctx: RouteContext) => Reply | undefined;

export interface UpstreamOptions {
  /** For messages. */
  name: string;
  handler: Handler;
  realm?: string;
  /** Starting mode (default "hostile"). */
  mode?: string;
}

const DIGEST_SETTINGS: DigestSettings = {
  digestAlgorithms: ['MD5'],
  digestChallenges: 'headers',
  digestQop: 'auth',
  digestOpaque: true,
  digestAlgorithmParam: true,
  digestDomain: false,
  digestNextnonce: false,
  nonceTtlMs: 10 * 60_000,
  nonceMaxUses: 0,
};

export class HostileUpstream {
  readonly requests: RecordedRequest[] = [];
  mode: string;
  /** When set, consulted before the Digest check (Digest edge cases). */
  authOverride: AuthOverride | undefined;
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  private readonly guard: DigestGuard;
  private port = 0;

  private constructor(private readonly opts: UpstreamOptions) {
    this.mode = opts.mode ?? 'hostile';
    this.guard = new DigestGuard({
      realm: opts.realm ?? `${opts.name}@feedsync-hostile`,
      domain: '/',
      username: USERNAME,
      password: PASSWORD,
      settings: () => DIGEST_SETTINGS,
    });
    this.server = createServer((req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        if (!res.headersSent) {
          res.statusCode = 500;
          res.end(String(err));
        } else res.destroy();
      });
    });
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
  }

  static async start(opts: UpstreamOptions): Promise<HostileUpstream> {
    const u = new HostileUpstream(opts);
    u.server.listen(0, '127.0.0.1');
    await once(u.server, 'listening');
    u.port = (u.server.address() as AddressInfo).port;
    return u;
  }

  get origin(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  url(path: string): string {
    return `${this.origin}${path}`;
  }

  heal(): void {
    this.mode = 'healed';
  }

  /** Authenticated requests for the feed (`/api/events` with a query or none). */
  feedRequests(): RecordedRequest[] {
    return this.requests.filter((r) => r.authenticated && r.path === '/api/events');
  }

  /** Authenticated requests for `path` (no query). */
  requestsFor(path: string): RecordedRequest[] {
    return this.requests.filter((r) => r.authenticated && r.path === path);
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    const query = new URLSearchParams(q === -1 ? '' : url.slice(q + 1));
    const rec: RecordedRequest = {
      n: this.requests.length,
      method: req.method ?? 'GET',
      url,
      path,
      query,
      authorization: req.headers.authorization !== undefined,
      authenticated: false,
      mode: this.mode,
      status: 0,
      bytes: 0,
      startedAt: Date.now(),
      cutShort: false,
    };
    this.requests.push(rec);
    res.on('close', () => {
      rec.endedAt = Date.now();
      rec.cutShort = !res.writableFinished;
    });
    // The request has no body (GET); drain whatever comes.
    req.resume();
    const ctx: RouteContext = {
      upstream: this,
      req,
      path,
      query,
      mode: this.mode,
      origin: this.origin,
      wantsXml:
        /application\/xml/.test(req.headers.accept ?? '') &&
        !/application\/json/.test(req.headers.accept ?? ''),
    };
    const override = this.authOverride?.(ctx);
    if (override) return this.send(res, rec, override);
    const verdict = this.guard.verify(rec.method, url, req.headers.authorization);
    if (!verdict.ok) {
      return this.send(res, rec, {
        status: 401,
        headers: { 'www-authenticate': this.guard.challenge(verdict.stale), 'content-type': 'text/plain' },
        body: 'unauthorized',
      });
    }
    rec.authenticated = true;
    return this.send(res, rec, await this.opts.handler(ctx));
  }

  private async send(res: ServerResponse, rec: RecordedRequest, reply: Reply): Promise<void> {
    rec.status = reply.status ?? 200;
    res.statusCode = rec.status;
    for (const [k, v] of Object.entries(reply.headers ?? {})) res.setHeader(k, v);
    if (reply.stream === undefined) {
      const body = reply.body === undefined ? Buffer.alloc(0) : Buffer.from(reply.body);
      if (!res.hasHeader('content-length') && !res.hasHeader('transfer-encoding'))
        res.setHeader('content-length', body.length);
      rec.bytes += body.length;
      res.end(body);
      return;
    }
    let closed = false;
    const onClose = new Promise<void>((r) =>
      res.once('close', () => {
        closed = true;
        r();
      }),
    );
    res.flushHeaders();
    for await (const chunk of reply.stream()) {
      if (reply.chunkDelayMs) await Promise.race([sleep(reply.chunkDelayMs), onClose]);
      if (closed || res.destroyed) return;
      rec.bytes += chunk.length;
      if (!res.write(chunk)) await Promise.race([once(res, 'drain'), onClose]);
      if (closed || res.destroyed) return;
    }
    res.end();
  }
}

// ---------------------------------------------------------------------------------------------
// Standard answers and hostile bodies.

export const JSON_TYPE = 'application/json; charset=utf-8';
export const XML_TYPE = 'application/xml; charset=utf-8';

export function jsonReply(body: string | Buffer, extra: Record<string, string> = {}): Reply {
  return { status: 200, headers: { 'content-type': JSON_TYPE, ...extra }, body };
}

/** The newer_than of a feed request (NaN when absent). */
export function newerThan(ctx: RouteContext): number {
  const v = ctx.query.get('newer_than');
  return v === null ? Number.NaN : Number(v);
}

export const isFeed = (ctx: RouteContext) => ctx.path === '/api/events';

/**
 * What a well-behaved service answers for `feed`: the feed page after newer_than (JSON or XML as
 * asked), one event at /api/events/{id}, each subject at its path, 404 for anything else.
 */
export function healthyReply(ctx: RouteContext, feed: Feed): Reply {
  if (isFeed(ctx)) {
    const nt = newerThan(ctx);
    const page = feed.page(Number.isNaN(nt) ? 0 : nt);
    const expand = (ctx.query.get('expand') ?? '').split(',').includes('subject');
    if (ctx.wantsXml)
      return {
        status: 200,
        headers: { 'content-type': XML_TYPE },
        body: feedXml(page, ctx.origin, feed.service, expand),
      };
    return jsonReply(feedJson(page, ctx.origin, feed.service, expand));
  }
  const single = /^\/api\/events\/(\d+)$/.exec(ctx.path);
  if (single) {
    const e = feed.byId(Number(single[1]));
    if (!e) return { status: 404, body: '' };
    return jsonReply(JSON.stringify(eventJson(e, ctx.origin, feed.service, false)));
  }
  if (feed.events.some((e) => e.subject === ctx.path || e.subject === ctx.origin + ctx.path)) {
    const r = subjectResource(ctx.path, ctx.origin);
    if (ctx.wantsXml)
      return {
        status: 200,
        headers: { 'content-type': XML_TYPE },
        body: `<${r.resource_type as string}><id type="integer">${r.id as number}</id><name>${xmlEscape(r.name as string)}</name><link rel="self" href="${xmlEscape(r.self_link as string)}"/></${r.resource_type as string}>`,
      };
    return jsonReply(JSON.stringify(r));
  }
  return { status: 404, headers: { 'content-type': 'text/plain' }, body: 'not found' };
}

const PAGE_PREFIX = '{"resource_type":"events","entries":[';
const EMPTY_OBJECTS_UNIT = '{},';

/** A JSON feed page of `{}` objects, exactly `totalBytes` long (a plain body). */
export function emptyObjectsPage(totalBytes: number): Buffer {
  const suffix = '{}]}';
  const n = Math.floor((totalBytes - PAGE_PREFIX.length - suffix.length) / EMPTY_OBJECTS_UNIT.length);
  const pad = totalBytes - PAGE_PREFIX.length - suffix.length - n * EMPTY_OBJECTS_UNIT.length;
  return Buffer.from(PAGE_PREFIX + EMPTY_OBJECTS_UNIT.repeat(n) + ' '.repeat(pad) + suffix);
}

/**
 * gzip of a JSON feed page of `{}` objects that inflates to `decodedBytes`, built in a stream loop
 * (1 MiB of input at a time, never the whole page in memory).
 */
export async function gzipBomb(decodedBytes: number): Promise<Buffer> {
  const gz = createGzip({ level: 9 });
  const out: Buffer[] = [];
  gz.on('data', (c: Buffer) => out.push(c));
  const ended = once(gz, 'end');
  const unit = Buffer.from(EMPTY_OBJECTS_UNIT.repeat(Math.floor(MiB / EMPTY_OBJECTS_UNIT.length)));
  const suffix = '{}]}';
  let written = PAGE_PREFIX.length;
  gz.write(PAGE_PREFIX);
  while (written + unit.length + suffix.length <= decodedBytes) {
    if (!gz.write(unit)) await once(gz, 'drain');
    written += unit.length;
  }
  const rest = decodedBytes - written - suffix.length;
  gz.write(EMPTY_OBJECTS_UNIT.repeat(Math.floor(rest / 3)) + ' '.repeat(rest % 3));
  gz.end(suffix);
  await ended;
  return Buffer.concat(out);
}

/**
 * A lazily streamed body: `prefix`, then one reused 64 KiB chunk of `unit` until about `totalBytes`,
 * then `suffix`. Nothing is buffered: a client that stops reading stops it.
 */
export function lazyBody(
  prefix: string,
  unit: string,
  totalBytes: number,
  suffix: string,
): () => Iterable<Buffer> {
  const chunk = Buffer.from(unit.repeat(Math.max(1, Math.floor(65536 / unit.length))));
  return function* () {
    yield Buffer.from(prefix);
    for (let sent = prefix.length; sent + chunk.length + suffix.length <= totalBytes; sent += chunk.length)
      yield chunk;
    yield Buffer.from(suffix);
  };
}

// ---------------------------------------------------------------------------------------------
// The daemon under test.

export interface RunOptions {
  service: Service;
  upstream: HostileUpstream;
  /** Source keys over the defaults (max_body_bytes, allowed_origins, format, timeout_ms, …). */
  source?: Record<string, unknown>;
  /** Reuse a previous run's directory (store and jsonl). */
  dir?: string;
  /** For the report file. */
  label?: string;
}

interface HealthProbe {
  at: number;
  latencyMs: number;
  status: number;
  error?: string;
}

export interface RunStats {
  /** VmHWM (bytes) read from /proc just before the daemon was stopped; undefined if it was gone. */
  vmHwm: number | undefined;
  /** Largest VmRSS sampled (bytes). */
  peakRss: number;
  rssSamples: number;
  /** VmRSS when the guard killed the daemon (bytes), if it did. */
  killedAtRss: number | undefined;
  healthProbes: number;
  healthFailures: string[];
  healthMaxLatencyMs: number;
  exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  /** The daemon had exited on its own before finish(). */
  exitedEarly: boolean;
}

/** VmRSS / VmHWM of a live process in bytes (undefined once it is gone). */
export function procStatus(pid: number, field: 'VmRSS' | 'VmHWM'): number | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/status`, 'utf8');
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text);
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

export async function httpGet(
  port: number,
  path: string,
  timeoutMs = 5000,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, agent: false, timeout: timeoutMs }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }),
      );
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end();
  });
}

export class DaemonRun {
  readonly rssSamples: number[] = [];
  readonly health: HealthProbe[] = [];
  killedAtRss: number | undefined;
  private rssTimer: NodeJS.Timeout | undefined;
  private healthLoop: Promise<void> | undefined;
  private sampling = true;
  private stats: RunStats | undefined;
  private readonly startedAt = Date.now();

  constructor(
    readonly proc: CliProcess,
    readonly port: number,
    readonly dir: string,
    readonly source: string,
    readonly jsonlPath: string,
    readonly label: string,
  ) {
    this.rssTimer = setInterval(() => {
      const rss = procStatus(proc.pid, 'VmRSS');
      if (rss === undefined) return;
      this.rssSamples.push(rss);
      if (rss > RSS_KILL_BYTES && this.killedAtRss === undefined) {
        this.killedAtRss = rss;
        proc.signal('SIGKILL');
      }
    }, 50);
    this.healthLoop = this.probeHealth();
  }

  private async probeHealth(): Promise<void> {
    while (this.sampling) {
      const started = performance.now();
      const probe: HealthProbe = { at: Date.now(), latencyMs: 0, status: 0 };
      try {
        const res = await httpGet(this.port, '/healthz', 5000);
        probe.status = res.status;
        if (res.status !== 200) probe.error = `HTTP ${res.status} ${res.body}`;
      } catch (err) {
        probe.error = (err as Error).message;
      }
      probe.latencyMs = performance.now() - started;
      this.health.push(probe);
      if (!this.sampling) break;
      await sleep(Math.max(0, 100 - probe.latencyMs));
    }
  }

  /** Every change in the jsonl so far. */
  changes(): Change[] {
    return readJsonl(this.jsonlPath);
  }

  logs(): LogEntry[] {
    return this.proc.logs();
  }

  /** `poll failed; cursor not moved` lines. */
  pollFailures(): LogEntry[] {
    return this.logs().filter((l) => l.msg === 'poll failed; cursor not moved');
  }

  /** Waits for a failed poll whose `err` matches; the timeout message lists the failures seen. */
  async waitForPollFailure(
    match: (err: string) => boolean,
    timeoutMs: number,
    what: string,
  ): Promise<LogEntry> {
    let line: LogEntry;
    try {
      line = await this.proc.waitForLog(
        (l) => l.msg === 'poll failed; cursor not moved' && typeof l.err === 'string' && match(l.err),
        timeoutMs,
        what,
      );
    } catch (err) {
      const seen = this.pollFailures().map((l) => String(l.err).slice(0, 400));
      throw new Error(
        `${(err as Error).message.split('\n')[0]}\npoll failures seen (${seen.length}):\n  ${[...new Set(seen)].slice(0, 5).join('\n  ')}` +
          `\nwarnings/errors:\n  ${this.notable().slice(0, 8).join('\n  ')}`,
      );
    }
    // The line names the source (the poller's logger binds it) and never the password.
    expect(line.source, 'the failed poll names its source').toBe(this.source);
    expect(JSON.stringify(line)).not.toContain(PASSWORD);
    return line;
  }

  /** Warn and error lines, shortened (for failure messages). */
  notable(): string[] {
    return this.logs()
      .filter((l) => (l.level ?? 0) >= 40)
      .map((l) => `${l.msg} ${l.err ? String(l.err).slice(0, 300) : ''}`);
  }

  /** Waits until the jsonl holds a change for every id (the error names the missing ones). */
  async waitForIds(ids: number[], timeoutMs: number): Promise<Change[]> {
    const deadline = Date.now() + timeoutMs;
    let changes: Change[] = [];
    let missing: number[] = ids;
    while (Date.now() < deadline) {
      changes = this.changes();
      const got = new Set(changes.map((c) => c.key));
      missing = ids.filter((id) => !got.has(`${this.source}:${id}`));
      if (missing.length === 0) return changes;
      if (this.proc.exit) break;
      await sleep(100);
    }
    throw new Error(
      `${missing.length} of ${ids.length} events never reached the jsonl within ${timeoutMs} ms ` +
        `(e.g. ${missing.slice(0, 8).join(', ')}); delivered ${changes.length}; daemon ${this.proc.exit ? `exited ${JSON.stringify(this.proc.exit)}` : 'running'}` +
        `\nlast poll failures: ${[...new Set(this.pollFailures().map((l) => String(l.err).slice(0, 300)))].slice(-3).join(' | ')}` +
        `\nwarnings/errors: ${this.notable().slice(-6).join(' | ')}`,
    );
  }

  async metricsText(): Promise<string> {
    const res = await httpGet(this.port, '/metrics', 5000);
    if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
    return res.body;
  }

  /** Every sample of metric `name`. */
  async series(name: string): Promise<Sample[]> {
    return parseSamples(await this.metricsText()).filter((s) => s.name === name);
  }

  /**
   * The sum of the samples of `name` whose labels include `labels` (`source` defaults to this
   * run's). Throws when the metric has no sample at all: a metric the product does not expose must
   * not read as 0.
   */
  async metric(name: string, labels: Record<string, string> = {}): Promise<number> {
    const all = await this.series(name);
    if (all.length === 0) throw new Error(`/metrics has no sample of ${name}`);
    const want = { source: this.source, ...labels };
    return all
      .filter((s) => Object.entries(want).every(([k, v]) => s.labels[k] === v))
      .reduce((sum, s) => sum + s.value, 0);
  }

  async readyz(): Promise<{ status: number; body: { ready?: boolean; reasons?: string[] } }> {
    const res = await httpGet(this.port, '/readyz', 5000);
    return { status: res.status, body: JSON.parse(res.body) as { ready?: boolean; reasons?: string[] } };
  }

  /** Polls /readyz until it answers `status` (the error shows the last answer). */
  async waitForReadyz(
    status: number,
    timeoutMs: number,
  ): Promise<{ status: number; body: { ready?: boolean; reasons?: string[] } }> {
    const deadline = Date.now() + timeoutMs;
    let last: Awaited<ReturnType<DaemonRun['readyz']>> | undefined;
    while (Date.now() < deadline) {
      last = await this.readyz().catch(() => undefined);
      if (last?.status === status) return last;
      await sleep(100);
    }
    throw new Error(
      `/readyz did not answer ${status} within ${timeoutMs} ms; last: ${JSON.stringify(last)}; failed polls logged: ${this.pollFailures().length}`,
    );
  }

  /** Stops the samplers, reads VmHWM, stops the daemon (SIGTERM). Idempotent. */
  async finish(): Promise<RunStats> {
    if (this.stats) return this.stats;
    // Sample a quick scenario for a little while too, so its figures rest on more than a probe or two.
    while (Date.now() - this.startedAt < MIN_OBSERVATION_MS && !this.proc.exit) await sleep(50);
    const exitedEarly = this.proc.exit !== undefined;
    this.sampling = false;
    await this.healthLoop;
    clearInterval(this.rssTimer);
    const vmHwm = procStatus(this.proc.pid, 'VmHWM');
    const last = procStatus(this.proc.pid, 'VmRSS');
    if (last !== undefined) this.rssSamples.push(last);
    const exit = await this.proc.stop(8000);
    const failures = this.health.filter((p) => p.error !== undefined);
    this.stats = {
      vmHwm,
      peakRss: Math.max(0, ...this.rssSamples),
      rssSamples: this.rssSamples.length,
      killedAtRss: this.killedAtRss,
      healthProbes: this.health.length,
      healthFailures: failures.map(
        (p) => `${new Date(p.at).toISOString()} ${p.error} (${Math.round(p.latencyMs)} ms)`,
      ),
      healthMaxLatencyMs: Math.max(0, ...this.health.map((p) => p.latencyMs)),
      exit,
      exitedEarly,
    };
    this.writeReport();
    return this.stats;
  }

  private writeReport(): void {
    const dir = process.env.HOSTILE_REPORT;
    if (!dir || !this.stats) return;
    mkdirSync(dir, { recursive: true });
    const pollErrors = [...new Set(this.pollFailures().map((l) => String(l.err)))];
    writeFileSync(
      join(dir, `${this.label.replace(/[^A-Za-z0-9_.-]+/g, '_')}.json`),
      JSON.stringify(
        {
          label: this.label,
          ...this.stats,
          vmHwmMiB: this.stats.vmHwm === undefined ? undefined : +(this.stats.vmHwm / MiB).toFixed(1),
          peakRssMiB: +(this.stats.peakRss / MiB).toFixed(1),
          healthFailures: this.stats.healthFailures.slice(0, 5),
          pollFailures: this.pollFailures().length,
          pollErrors: pollErrors.slice(0, 5).map((e) => e.slice(0, 500)),
          notable: [...new Set(this.notable())].slice(0, 10),
          delivered: this.changes().length,
        },
        null,
        2,
      ),
    );
  }
}

/** Directories of the runs started since the last Servers.closeAll(). */
const runDirs = new Set<string>();

/** Writes the config (one source against `upstream`, local queue, jsonl sink) and starts `feedsync run`. */
export async function startRun(opts: RunOptions): Promise<DaemonRun> {
  const dir = opts.dir ?? tempDir('feedsync-hostile-');
  runDirs.add(dir);
  const jsonlPath = join(dir, 'changes.jsonl');
  const name = opts.service;
  const raw = {
    shutdown_timeout_ms: 5000,
    store: { path: join(dir, 'feedsync.db') },
    queue: { driver: 'local', backoff_ms: 50, max_backoff_ms: 1000 },
    sources: [
      {
        name,
        service: opts.service,
        base_url: opts.upstream.origin,
        username: USERNAME,
        password: PASSWORD,
        start_from: 'earliest',
        poll_interval_ms: 100,
        timeout_ms: 5000,
        subject_concurrency: 8,
        ...opts.source,
      },
    ],
    sinks: [{ name: 'file', type: 'jsonl', path: jsonlPath }],
    http: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
  };
  const configPath = writeConfig(dir, raw, `feedsync-${Date.now()}.yaml`);
  const proc = spawnCli(['run'], {
    config: configPath,
    echo: process.env.HOSTILE_ECHO ? `[${opts.label ?? name}]` : undefined,
  });
  const started = await proc.waitForLog((l) => l.msg === 'feedsync started', 20_000, '"feedsync started"');
  const port = started.metrics_port;
  if (typeof port !== 'number') throw new Error(`no metrics_port in ${JSON.stringify(started)}`);
  return new DaemonRun(proc, port, dir, name, jsonlPath, opts.label ?? name);
}

// ---------------------------------------------------------------------------------------------
// Assertions shared by every scenario.

/**
 * What holds whatever the scenario: the daemon stayed up and alive (/healthz answered every 100 ms
 * probe, each within HEALTH_MAX_LATENCY_MS), its peak RSS stayed under RSS_LIMIT_BYTES, the
 * password appears nowhere in its output or the jsonl, and the foreign server saw nothing.
 */
export function expectHealthy(
  run: DaemonRun,
  stats: RunStats,
  opts: { foreign?: HostileUpstream[]; rssLimit?: number } = {},
): void {
  const limit = opts.rssLimit ?? RSS_LIMIT_BYTES;
  const mib = (b: number | undefined) => (b === undefined ? 'n/a' : `${(b / MiB).toFixed(1)} MiB`);
  expect
    .soft(stats.killedAtRss, `daemon SIGKILLed by the test at RSS ${mib(stats.killedAtRss)}`)
    .toBeUndefined();
  expect
    .soft(
      stats.exitedEarly,
      `daemon exited on its own: ${JSON.stringify(stats.exit)}\n${run.proc.text().slice(-2000)}`,
    )
    .toBe(false);
  expect.soft(stats.vmHwm, 'VmHWM readable at the end').toBeDefined();
  expect
    .soft(
      Math.max(stats.vmHwm ?? 0, stats.peakRss),
      `peak RSS (VmHWM ${mib(stats.vmHwm)}, sampled ${mib(stats.peakRss)}) ≤ ${mib(limit)}`,
    )
    .toBeLessThanOrEqual(limit);
  expect.soft(stats.rssSamples, 'RSS samples taken').toBeGreaterThan(5);
  expect.soft(stats.healthProbes, '/healthz probes made').toBeGreaterThan(5);
  expect.soft(stats.healthFailures, '/healthz failures').toEqual([]);
  expect.soft(stats.healthMaxLatencyMs, '/healthz max latency (ms)').toBeLessThan(HEALTH_MAX_LATENCY_MS);
  const text = run.proc.text();
  expect.soft(text.includes(PASSWORD), 'the password in the daemon output').toBe(false);
  let jsonl = '';
  try {
    jsonl = readFileSync(run.jsonlPath, 'utf8');
  } catch {
    // no output yet
  }
  expect.soft(jsonl.includes(PASSWORD), 'the password in the jsonl').toBe(false);
  for (const f of opts.foreign ?? []) {
    expect
      .soft(
        f.requests.map((r) => r.url),
        'requests to the foreign server',
      )
      .toEqual([]);
  }
  expect.soft(stats.exit?.signal ?? null, 'graceful stop (no signal needed beyond SIGTERM)').toBeNull();
}

/**
 * Every event of `feed` delivered exactly once (no key the feed does not hold), and per subject
 * in the order the feed lists them.
 */
export function expectDeliveredOnce(changes: Change[], feed: Feed, source: string, ids = feed.ids()): void {
  const counts = new Map<string, number>();
  for (const c of changes) counts.set(c.key, (counts.get(c.key) ?? 0) + 1);
  const want = new Set(ids.map((id) => `${source}:${id}`));
  const missing = [...want].filter((k) => !counts.has(k));
  const twice = [...counts].filter(([, n]) => n > 1).map(([k, n]) => `${k}×${n}`);
  const unexpected = [...counts.keys()].filter((k) => !want.has(k));
  expect(missing, 'events never delivered').toEqual([]);
  expect(twice, 'events delivered more than once').toEqual([]);
  expect(unexpected, 'keys the feed does not hold').toEqual([]);
  const rank = new Map(feed.events.map((e, i) => [e.id, i]));
  const lastBySubject = new Map<string, number>();
  const outOfOrder: string[] = [];
  for (const c of changes) {
    const r = rank.get(c.event_id);
    if (r === undefined || c.subject_url === null) continue;
    const prev = lastBySubject.get(c.subject_url);
    if (prev !== undefined && prev > r) outOfOrder.push(`${c.subject_url}: ${c.event_id} after rank ${prev}`);
    lastBySubject.set(c.subject_url, r);
  }
  expect(outOfOrder, 'changes of one subject out of feed order').toEqual([]);
}

/** The error text names the URL as requested; never the password. */
export function expectRefusalText(err: string, url: string, detail: RegExp): void {
  expect(err).toContain(`refused GET ${url}`);
  expect(err).toMatch(detail);
  expect(err).not.toContain(PASSWORD);
}

/**
 * The cursor did not move: after the failed page the daemon asked for the same page again (same
 * newer_than), never for a later one, and delivered nothing from it. Waits for the repeat.
 */
export async function expectCursorUnmoved(
  run: DaemonRun,
  upstream: HostileUpstream,
  nt: number,
  pageIds: number[],
  timeoutMs = 5000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const same = () =>
    upstream.feedRequests().filter((r) => r.mode === 'hostile' && Number(r.query.get('newer_than')) === nt);
  while (same().length < 2 && Date.now() < deadline) await sleep(50);
  expect(
    same().length,
    `feed requests with newer_than=${nt} while hostile (the page asked again)`,
  ).toBeGreaterThanOrEqual(2);
  const later = upstream
    .feedRequests()
    .filter((r) => r.mode === 'hostile' && Number(r.query.get('newer_than')) > nt)
    .map((r) => r.url);
  expect(later, 'feed requests past the refused page').toEqual([]);
  const delivered = run.changes().filter((c) => pageIds.includes(c.event_id));
  expect(
    delivered.map((c) => c.key),
    'changes of the refused page delivered',
  ).toEqual([]);
}

/** The one log line's fields and message, as text (for "names the event id" checks). */
export const logText = (l: LogEntry) => JSON.stringify(l);

/** A metric's value, or the reason it could not be read (so a soft assertion reports it). */
export async function metricOr(
  run: DaemonRun,
  name: string,
  labels: Record<string, string> = {},
): Promise<number | string> {
  try {
    return await run.metric(name, labels);
  } catch (err) {
    return `unreadable: ${(err as Error).message}`;
  }
}

/** Starts the real upstream and a foreign one (which must see nothing); both closed by closeAll(). */
export class Servers {
  private readonly open: HostileUpstream[] = [];
  async start(opts: UpstreamOptions): Promise<HostileUpstream> {
    const u = await HostileUpstream.start(opts);
    this.open.push(u);
    return u;
  }
  /** A server no request should reach: it answers 404 to everything and records what came. */
  foreign(): Promise<HostileUpstream> {
    return this.start({ name: 'foreign', handler: () => ({ status: 404, body: 'foreign' }) });
  }
  /** Closes every server, and removes the runs' directories (HOSTILE_KEEP=1 keeps them). */
  async closeAll(): Promise<void> {
    await Promise.all(this.open.splice(0).map((u) => u.close()));
    if (!process.env.HOSTILE_KEEP) for (const dir of runDirs) rmSync(dir, { recursive: true, force: true });
    runDirs.clear();
  }
}

/** Events committed as counted by feedsync_events_total (all event types of this run's source). */
export async function eventsCounted(run: DaemonRun): Promise<number | string> {
  try {
    const series = (await run.series('feedsync_events_total')).filter((s) => s.labels.source === run.source);
    return series.reduce((sum, s) => sum + s.value, 0);
  } catch (err) {
    return `unreadable: ${(err as Error).message}`;
  }
}

/**
 * The shape most scenarios share: a source whose upstream answers `hostile` (where it returns a
 * reply; elsewhere the healthy feed) until healed. The poll fails with an error `failure` picks,
 * `check` inspects it, the same page is asked again (cursor unmoved), `metric` (when given) counts
 * it; healed, every event arrives once, and the run stayed healthy throughout.
 */
export async function refusedThenHealed(
  servers: Servers,
  opts: {
    label: string;
    feed: Feed;
    hostile: (ctx: RouteContext, foreign: HostileUpstream) => Reply | undefined;
    source?: Record<string, unknown>;
    failure: (err: string, upstream: HostileUpstream) => boolean;
    check: (err: string, upstream: HostileUpstream) => void;
    metric?: { name: string; labels: Record<string, string> };
    timeoutMs?: number;
  },
): Promise<{ foreign: HostileUpstream; upstream: HostileUpstream; output: string; jsonl: string }> {
  const { feed } = opts;
  const foreign = await servers.foreign();
  const upstream = await servers.start({
    name: 'upstream',
    handler: (ctx) =>
      (ctx.mode === 'hostile' ? opts.hostile(ctx, foreign) : undefined) ?? healthyReply(ctx, feed),
  });
  const run = await startRun({ service: feed.service, upstream, source: opts.source, label: opts.label });
  const timeoutMs = opts.timeoutMs ?? 15_000;
  let changes;
  try {
    const failure = await run.waitForPollFailure(
      (e) => opts.failure(e, upstream),
      timeoutMs,
      `a failed poll (${opts.label})`,
    );
    const err = String(failure.err);
    expect(err).not.toContain(PASSWORD);
    opts.check(err, upstream);
    await expectCursorUnmoved(run, upstream, 0, feed.ids());
    if (opts.metric)
      expect.soft(await metricOr(run, opts.metric.name, opts.metric.labels)).toBeGreaterThanOrEqual(1);
    upstream.heal();
    changes = await run.waitForIds(feed.ids(), timeoutMs);
  } finally {
    expectHealthy(run, await run.finish(), { foreign: [foreign] });
  }
  expectDeliveredOnce(changes, feed, run.source);
  return { foreign, upstream, output: run.proc.text(), jsonl: JSON.stringify(changes) };
}
