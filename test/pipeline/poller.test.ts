// The poller's decisions, with a scripted upstream standing in for the HTTP client (the real
// client and sandbox are exercised in e2e.test.ts; here we need pages no honest service sends).
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import type { SourceConfig } from '../../src/config/types.js';
import {
  UndecodableSubjectError,
  UpstreamAuthError,
  UpstreamHttpError,
  UpstreamRefusedError,
} from '../../src/core/errors.js';
import type { Change } from '../../src/core/change.js';
import { PipelineEvents } from '../../src/core/events.js';
import { runPoller } from '../../src/pipeline/poller.js';
import type { ChangeQueue, PageCommit } from '../../src/queue/queue.js';
import { services } from '../../src/services/index.js';
import { sqliteSourceState } from '../../src/queue/sqlite-source-state.js';
import { CursorStore } from '../../src/store/cursors.js';
import { openStore } from '../../src/store/store.js';
import { BodyOverCapError, type FetchResult, type UpstreamClient } from '../../src/upstream/client.js';
import type { Resource } from '../../src/core/resource.js';
import { assertValidChange } from '../support/change-schema.js';
import { tempDir, waitFor } from '../support/harness.js';

const BASE = 'http://upstream.test/wf';
const source = (over: Partial<SourceConfig> = {}): SourceConfig => ({
  name: 'wf',
  service: 'workflow',
  base_url: BASE,
  username: 'u',
  password: 'p',
  format: 'json',
  event_types: [],
  expand_subject: true,
  expand_source: false,
  start_from: 'earliest',
  poll_interval_ms: 20,
  timeout_ms: 1000,
  subject_concurrency: 4,
  compression: true,
  max_body_bytes: 8 * 1024 * 1024,
  max_page_bytes: 32 * 1024 * 1024,
  max_change_bytes: 8 * 1024 * 1024,
  on_undecodable_subject: 'stop',
  allowed_origins: [],
  allow_insecure_http: false,
  digest_min: 'md5',
  require_qop: false,
  ...over,
});
const ev = (id: number, type: string, subject: string): Resource => ({
  resource_type: 'event',
  id,
  event_type: type,
  timestamp: '2026-11-20T10:00:00.000Z',
  self_link: `${BASE}/api/events/${id}`,
  subject_link: `${BASE}/api/work_areas/1/jobs/${subject}`,
});

/** Serves feed pages by newer_than from a list, subjects from a map; records every request. */
class ScriptedUpstream implements UpstreamClient {
  requests: string[] = [];
  subjectFailures = new Map<string, number>();
  feedError?: () => Error | undefined;
  constructor(
    public events: Resource[],
    public subjects: Record<string, Resource | 404>,
  ) {}
  async get(url: string, opts: { kind: 'feed' | 'subject'; maxBodyBytes?: number }): Promise<FetchResult> {
    this.requests.push(url);
    if (opts.kind === 'feed') {
      const err = this.feedError?.();
      if (err) throw err;
      const newerThan = new URL(url).searchParams.get('newer_than');
      // Without newer_than: the last 50 events (the scheduling spec's reading).
      const entries =
        newerThan === null
          ? this.events.slice(-50)
          : this.events.filter((e) => (e.id as number) > Number(newerThan)).slice(0, 50);
      return { status: 200, url, resource: { resource_type: 'events', entries }, bytes: 0 };
    }
    const left = this.subjectFailures.get(url) ?? 0;
    if (left > 0) {
      this.subjectFailures.set(url, left - 1);
      throw new UpstreamHttpError(url, 503, 'busy');
    }
    const s = this.subjects[url];
    if (s === undefined || s === 404) return { status: 404, url };
    const bytes = JSON.stringify(s).length;
    // Like the real client: a body over the request's own cap is not read.
    if (opts.maxBodyBytes !== undefined && bytes > opts.maxBodyBytes)
      throw new BodyOverCapError(url, opts.maxBodyBytes);
    return { status: 200, url, resource: s, bytes };
  }
  stats() {
    return { requests: this.requests.length, unauthorized: 0 };
  }
  async close() {}
}

class MemoryQueue implements ChangeQueue {
  commits: PageCommit[] = [];
  registered: string[] = [];
  constructor(private readonly cursors: CursorStore) {}
  async commitPage(c: PageCommit) {
    this.commits.push(c);
    this.cursors.save(c.source, c.cursor, c.seenAbove);
    return { sink: c.changes.length };
  }
  async laggingSinks() {
    return [];
  }
  async commitCatchUp(): Promise<never> {
    throw new Error('no sink lags here');
  }
  async registerSinks(source: string) {
    this.registered.push(source);
    return [];
  }
  get changes(): Change[] {
    return this.commits.flatMap((c) => c.changes);
  }
}

const stops: AbortController[] = [];
afterEach(() => stops.splice(0).forEach((s) => s.abort()));

function start(
  client: ScriptedUpstream,
  over: Partial<SourceConfig> = {},
  auditIntervalMs?: number,
  opts: { statusNeverAnswers?: boolean; cursor?: number } = {},
) {
  const cursors = new CursorStore(openStore(join(tempDir(), 'store.db')));
  if (opts.cursor !== undefined) cursors.save('wf', opts.cursor, []);
  const sourceState = sqliteSourceState(cursors);
  // A status write caught in a failover that the Redis client never settles.
  if (opts.statusNeverAnswers) sourceState.recordPoll = () => new Promise<void>(() => undefined);
  const queue = new MemoryQueue(cursors);
  const events = new PipelineEvents();
  const stop = new AbortController();
  stops.push(stop);
  const polls: boolean[] = [];
  events.on('poll:finished', (e) => polls.push(e.ok));
  const unknown: string[] = [];
  events.on('event:unknown-type', (e) => unknown.push(e.eventType));
  const anomalies: string[] = [];
  events.on('feed:anomaly', (e) => anomalies.push(`${e.kind}:${e.eventId}`));
  const errors: string[] = [];
  events.on('poll:finished', (e) => {
    if (!e.ok) errors.push(String((e.error as Error)?.message));
  });
  const refusals: string[] = [];
  events.on('upstream:refused', (e) => refusals.push(e.reason));
  // Warnings and errors, parsed.
  const logs: { msg: string; [k: string]: unknown }[] = [];
  const done = runPoller({
    source: source(over),
    adapter: services.workflow,
    client,
    queue,
    sourceState,
    events,
    logger: pino({ level: 'warn' }, { write: (line: string) => logs.push(JSON.parse(line)) }),
    signal: stop.signal,
    ...(auditIntervalMs === undefined ? {} : { auditIntervalMs }),
  });
  return { queue, cursors, polls, unknown, anomalies, errors, refusals, logs, stop, done, events };
}

const job = (n: string): Resource => ({ resource_type: 'job', id: Number(n), name: `job ${n}` });
const url = (n: string) => `${BASE}/api/work_areas/1/jobs/${n}`;

describe('poller', () => {
  it('fetches each distinct subject once per page and shares it between the events of that subject', async () => {
    const events = [
      ev(1, 'job_created', '7'),
      ev(2, 'job_updated', '7'),
      ev(3, 'job_updated', '8'),
      ev(4, 'job_updated', '7'),
    ];
    const up = new ScriptedUpstream(events, { [url('7')]: job('7'), [url('8')]: job('8') });
    const p = start(up);
    await waitFor(() => p.queue.changes.length === 4, 5000, 'four changes');
    expect(up.requests.filter((r) => r === url('7'))).toHaveLength(1);
    expect(p.queue.changes.map((c) => c.subject)).toEqual([job('7'), job('7'), job('8'), job('7')]);
  });

  it('goes on polling when the status write of a poll is never answered', async () => {
    const up = new ScriptedUpstream([ev(1, 'job_updated', '7')], {
      [url('7')]: job('7'),
      [url('8')]: job('8'),
    });
    const p = start(up, { poll_interval_ms: 50 }, undefined, { statusNeverAnswers: true });
    await waitFor(() => p.queue.changes.length === 1, 5000, 'the first change');
    up.events.push(ev(2, 'job_updated', '8'));
    await waitFor(
      () => p.queue.changes.length === 2,
      8000,
      'the next change, after a status write that hung',
    );
  });

  it('gives gone on 404, deleted without a fetch for *_deleted events', async () => {
    const up = new ScriptedUpstream([ev(1, 'job_updated', '9'), ev(2, 'job_deleted', '8')], {});
    const p = start(up);
    await waitFor(() => p.queue.changes.length === 2, 5000, 'two changes');
    expect(p.queue.changes.map((c) => c.subject_state)).toEqual(['gone', 'deleted']);
    expect(up.requests.filter((r) => r === url('9'))).toHaveLength(1);
    expect(up.requests.filter((r) => r === url('8'))).toHaveLength(0);
  });

  it('fails the page when a subject still fails after the client retried it: counted, retried with backoff, then committed whole', async () => {
    const up = new ScriptedUpstream([ev(1, 'job_updated', '7'), ev(2, 'job_updated', '8')], {
      [url('7')]: job('7'),
      [url('8')]: job('8'),
    });
    // The scripted client does not retry: each failure here is one the real client gave up on.
    up.subjectFailures.set(url('8'), 3);
    const p = start(up);
    await waitFor(() => p.queue.changes.length === 2, 10_000, 'both changes');
    expect(p.polls.slice(0, 4)).toEqual([false, false, false, true]);
    expect(p.errors).toHaveLength(3);
    for (const err of p.errors)
      expect(err).toMatch(/subject of event 2 \(job_updated\): HTTP 503 on GET .*jobs\/8/);
    expect(up.requests.filter((r) => r === url('8'))).toHaveLength(4);
    const pages = p.queue.commits.filter((c) => c.changes.length);
    expect(pages).toHaveLength(1);
    expect(pages[0]!.changes).toHaveLength(2);
  });

  it('delivers an event type the specs do not list, reporting it once per type', async () => {
    const up = new ScriptedUpstream(
      [ev(1, 'job_archived', '7'), ev(2, 'job_archived', '7'), ev(3, 'heartbeat', '7')],
      { [url('7')]: job('7') },
    );
    const p = start(up);
    await waitFor(() => p.queue.changes.length === 3, 5000, 'three changes');
    expect(p.unknown).toEqual(['job_archived', 'heartbeat']);
    expect(p.queue.changes.map((c) => [c.resource_type, c.operation])).toEqual([
      ['job', 'archived'],
      ['job', 'archived'],
      ['heartbeat', 'unknown'],
    ]);
  });

  it('ignores events at or below the cursor that a misbehaving feed lists again', async () => {
    const up = new ScriptedUpstream([ev(5, 'job_updated', '7')], { [url('7')]: job('7') });
    const p = start(up, { start_from: 4 });
    await waitFor(() => p.queue.changes.length === 1, 5000, 'first change');
    up.events = [ev(3, 'job_updated', '7'), ev(5, 'job_updated', '7'), ev(6, 'job_updated', '7')];
    // the scripted feed filters by newer_than itself; make it lie like a broken upstream would
    up.get = async (u: string, o) =>
      o.kind === 'feed'
        ? { status: 200, url: u, resource: { resource_type: 'events', entries: up.events }, bytes: 0 }
        : ScriptedUpstream.prototype.get.call(up, u, o);
    await waitFor(() => p.queue.changes.length === 2, 5000, 'second change');
    await new Promise((r) => setTimeout(r, 100));
    expect(p.queue.changes.map((c) => c.event_id)).toEqual([5, 6]);
  });

  it('fails a page with an unusable event as a whole and keeps the cursor', async () => {
    const up = new ScriptedUpstream(
      [ev(1, 'job_updated', '7'), { ...ev(2, 'job_updated', '7'), timestamp: 'yesterday' }],
      { [url('7')]: job('7') },
    );
    const p = start(up);
    await waitFor(() => p.polls.filter((ok) => !ok).length >= 2, 10_000, 'failed polls');
    expect(p.queue.commits).toHaveLength(0);
    expect(p.cursors.get('wf')).toBeUndefined();
  });

  it('retries wrong credentials slowly: no faster than poll_interval_ms, backing off', async () => {
    const up = new ScriptedUpstream([], {});
    up.feedError = () => new UpstreamAuthError(`${BASE}/api/events`, 'rejected');
    const p = start(up, { poll_interval_ms: 200 });
    await new Promise((r) => setTimeout(r, 1100));
    // at most one attempt per 200 ms interval (plus the first), never a tight loop
    expect(up.requests.length).toBeGreaterThanOrEqual(2);
    expect(up.requests.length).toBeLessThanOrEqual(6);
    expect(p.polls.every((ok) => !ok)).toBe(true);
  });
});

describe('gone subjects', () => {
  it('fetches a deleted subject at most once, and not at all when its delete is on the same page', async () => {
    const events = [ev(1, 'job_updated', '9'), ev(2, 'job_updated', '5'), ev(3, 'job_deleted', '5')];
    const up = new ScriptedUpstream(events, {});
    const p = start(up);
    await waitFor(() => p.queue.changes.length === 3, 5000, 'first page');
    up.events.push(ev(4, 'job_updated', '9'), ev(5, 'job_deleted', '9'));
    await waitFor(() => p.queue.changes.length === 5, 5000, 'second page');
    expect(p.queue.changes.map((c) => c.subject_state)).toEqual([
      'gone',
      'gone',
      'deleted',
      'gone',
      'deleted',
    ]);
    expect(up.requests.filter((r) => r === url('9'))).toHaveLength(1);
    expect(up.requests.filter((r) => r === url('5'))).toHaveLength(0);
  });
});

/** Subjects answer after a delay; records how many are in flight and when pages are read. */
class SlowSubjects extends ScriptedUpstream {
  inFlight = 0;
  maxInFlight = 0;
  log: string[] = [];
  override async get(u: string, opts: { kind: 'feed' | 'subject' }): Promise<FetchResult> {
    if (opts.kind === 'feed') {
      this.log.push(`read ${new URL(u).searchParams.get('newer_than') ?? 0}`);
      return super.get(u, opts);
    }
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    try {
      await new Promise((r) => setTimeout(r, 3));
      return await super.get(u, opts);
    } finally {
      this.inFlight--;
    }
  }
}

describe('read-ahead while catching up', () => {
  const backlog = (n: number) => Array.from({ length: n }, (_, i) => ev(i + 1, 'job_updated', String(i + 1)));
  const subjectsOf = (n: number) =>
    Object.fromEntries(Array.from({ length: n }, (_, i) => [url(String(i + 1)), job(String(i + 1))]));

  it('reads the next page while this one expands, within subject_concurrency, and commits the pages ready together in order', async () => {
    const up = new SlowSubjects(backlog(160), subjectsOf(160));
    const p = start(up, { subject_concurrency: 3 });
    const commitAt: number[] = [];
    const commit = p.queue.commitPage.bind(p.queue);
    p.queue.commitPage = async (c) => {
      up.log.push(`commit ${c.cursor}`);
      commitAt.push(c.cursor);
      return commit(c);
    };
    await waitFor(() => p.queue.changes.length === 160, 10_000, 'the whole backlog');
    expect(up.maxInFlight).toBeLessThanOrEqual(3);
    expect(up.maxInFlight).toBe(3);
    // The workflow cursor trails a full page by its disorder bound (45 of 50): the pages end at
    // 45, 90, 135 and 160. Each commit ends on one of them, in order; ready pages went together.
    expect(commitAt.every((c) => [45, 90, 135, 160].includes(c))).toBe(true);
    expect(commitAt).toEqual([...commitAt].sort((a, b) => a - b));
    expect(commitAt.at(-1)).toBe(160);
    expect(commitAt.length).toBeLessThan(4);
    // Page 2 was read while page 1 was still being expanded.
    expect(up.log.indexOf('read 45')).toBeGreaterThan(-1);
    expect(up.log.indexOf('read 45')).toBeLessThan(up.log.indexOf(`commit ${commitAt[0]}`));
    expect(p.queue.changes.map((c) => c.event_id)).toEqual(backlog(160).map((e) => e.id));
    expect(p.queue.changes.every((c) => c.subject_state === 'present')).toBe(true);
    // Every page read is a poll, with its own size.
    expect(p.polls.filter((ok) => ok).length).toBeGreaterThanOrEqual(4);
  });

  it('commits at most 16 pages together, each commit from where the last one ended', async () => {
    const up = new ScriptedUpstream(backlog(1000), subjectsOf(1000));
    const p = start(up);
    await waitFor(() => p.queue.changes.length === 1000, 20_000, 'the whole backlog');
    const commits = p.queue.commits.filter((c) => c.changes.length);
    expect(commits.length).toBeGreaterThanOrEqual(2);
    expect(commits.length, 'ready pages go together').toBeLessThan(20);
    // A page after the first brings 45 new events (its first 5 were queued above the cursor):
    // 16 pages are at most 50 + 15 × 45 events.
    expect(Math.max(...commits.map((c) => c.changes.length))).toBeLessThanOrEqual(50 + 15 * 45);
    commits.slice(1).forEach((c, i) => expect(c.from?.cursor).toBe(commits[i]!.cursor));
    expect(p.queue.changes.map((c) => c.event_id)).toEqual(backlog(1000).map((e) => e.id));
  });

  it('commits the pages it has when the next one is slow, without waiting for it', async () => {
    const up = new ScriptedUpstream(backlog(100), subjectsOf(100));
    const slow = url('60');
    let released!: () => void;
    const gate = new Promise<void>((r) => (released = r));
    const get = up.get.bind(up);
    up.get = async (u, o) => {
      if (u === slow) await gate;
      return get(u, o);
    };
    const p = start(up);
    await waitFor(() => p.queue.changes.length >= 45, 5_000, 'the first page, alone');
    expect(p.queue.commits.filter((c) => c.changes.length).map((c) => c.cursor)).toEqual([45]);
    released();
    await waitFor(() => p.queue.changes.length === 100, 5_000, 'the rest');
    expect(p.queue.changes.map((c) => c.event_id)).toEqual(backlog(100).map((e) => e.id));
  });

  it('drops the page read ahead when this page fails, and reads it again after the retry', async () => {
    const up = new SlowSubjects(backlog(100), subjectsOf(100));
    const p = start(up);
    const commit = p.queue.commitPage.bind(p.queue);
    let failNext = true;
    p.queue.commitPage = async (c) => {
      if (failNext) {
        failNext = false;
        throw new Error('store full');
      }
      return commit(c);
    };
    await waitFor(() => p.queue.changes.length === 100, 10_000, 'both pages');
    expect(p.polls[0]).toBe(false);
    const cursors = p.queue.commits.filter((c) => c.changes.length).map((c) => c.cursor);
    expect(cursors).toEqual([...cursors].sort((a, b) => a - b));
    expect(cursors.at(-1)).toBe(100);
    expect(p.queue.changes.map((c) => c.event_id)).toEqual(backlog(100).map((e) => e.id));
    // Page 2 was read ahead, dropped with the failure, and read again.
    expect(up.log.filter((l) => l === 'read 45').length).toBeGreaterThanOrEqual(2);
  });
});

describe('no silent loss from a feed that breaks its own rules', () => {
  const ids = (p: { queue: MemoryQueue }) => p.queue.changes.map((c) => c.event_id);

  it('delivers an event listed twice on one page once, and counts it', async () => {
    const up = new ScriptedUpstream(
      [
        ev(1, 'job_updated', '7'),
        ev(2, 'job_updated', '7'),
        ev(2, 'job_updated', '7'),
        ev(3, 'job_updated', '7'),
      ],
      { [url('7')]: job('7') },
    );
    const p = start(up);
    await waitFor(() => ids(p).length >= 3, 5000, 'three changes');
    await new Promise((r) => setTimeout(r, 100));
    expect(ids(p)).toEqual([1, 2, 3]);
    expect(p.anomalies).toContain('duplicate_id:2');
  });

  it('refuses a page listing two different events under one id, naming both, and keeps the cursor', async () => {
    const up = new ScriptedUpstream(
      [ev(1, 'job_updated', '7'), ev(2, 'job_updated', '7'), ev(2, 'job_deleted', '7')],
      { [url('7')]: job('7') },
    );
    const p = start(up);
    await waitFor(() => p.errors.length >= 2, 10_000, 'failed polls');
    expect(p.queue.commits).toHaveLength(0);
    expect(p.cursors.get('wf')).toBeUndefined();
    expect(p.errors[0]).toMatch(
      /lists event 2 twice with different contents \("job_updated" .*"job_deleted"/,
    );
  });

  it('delivers late an event listed behind the cursor that was never delivered, and counts it', async () => {
    const up = new ScriptedUpstream([ev(5, 'job_updated', '7'), ev(6, 'job_updated', '7')], {
      [url('7')]: job('7'),
    });
    const p = start(up);
    await waitFor(() => ids(p).length === 2, 5000, 'first changes');
    const lying = [
      ev(3, 'job_updated', '7'),
      ev(5, 'job_updated', '7'),
      ev(6, 'job_updated', '7'),
      ev(7, 'job_updated', '7'),
    ];
    up.get = async (u: string, o) =>
      o.kind === 'feed'
        ? { status: 200, url: u, resource: { resource_type: 'events', entries: lying }, bytes: 0 }
        : ScriptedUpstream.prototype.get.call(up, u, o);
    await waitFor(() => ids(p).length === 4, 5000, 'late and new changes');
    await new Promise((r) => setTimeout(r, 100));
    // 5 and 6 were delivered by this process: a re-listing, skipped; 3 never was.
    expect(ids(p)).toEqual([5, 6, 3, 7]);
    expect(p.anomalies).toEqual(['behind_cursor:3']);
  });

  it('reports an event listed again with another type or subject once, keeping the change queued first', async () => {
    const up = new ScriptedUpstream([ev(5, 'job_updated', '7'), ev(6, 'job_updated', '7')], {
      [url('7')]: job('7'),
      [url('8')]: job('8'),
    });
    const p = start(up);
    await waitFor(() => ids(p).length === 2, 5000, 'first changes');
    const changed = [ev(5, 'job_deleted', '8'), ev(6, 'job_updated', '7'), ev(7, 'job_updated', '7')];
    let listings = 0;
    up.get = async (u: string, o) => {
      if (o.kind !== 'feed') return ScriptedUpstream.prototype.get.call(up, u, o);
      listings++;
      return { status: 200, url: u, resource: { resource_type: 'events', entries: changed }, bytes: 0 };
    };
    await waitFor(() => ids(p).length === 3 && listings >= 4, 5000, 'the new change and more polls');
    expect(ids(p)).toEqual([5, 6, 7]);
    expect(p.queue.changes[0]).toMatchObject({ event_type: 'job_updated', subject_url: url('7') });
    expect(p.anomalies, 'counted once, not at every listing').toEqual(['relisted_changed:5']);
    const warned = p.logs.filter((l) => l.msg.startsWith('feed lists event 5 again with other contents'));
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({
      event_id: 5,
      differs: ['event_type: "job_updated" → "job_deleted"', `subject_link: "${url('7')}" → "${url('8')}"`],
    });
    expect(warned[0]!.msg).toContain('the change queued first is kept (key wf:5)');
  });

  it('reads event 0 when starting from earliest, first, and once', async () => {
    const up = new ScriptedUpstream(
      [ev(0, 'job_created', '7'), ev(1, 'job_updated', '7'), ev(2, 'job_updated', '8')],
      {
        [url('7')]: job('7'),
        [url('8')]: job('8'),
      },
    );
    const p = start(up);
    await waitFor(() => ids(p).length === 3, 5000, 'three changes');
    await waitFor(() => p.polls.length >= 4, 5000, 'more polls');
    expect(ids(p)).toEqual([0, 1, 2]);
    expect(p.anomalies).toEqual([]);
    expect(p.cursors.get('wf')).toEqual({ eventId: 2, seenAbove: [] });
    // Asked without newer_than only while at cursor 0.
    const unfiltered = up.requests.filter((r) => r.includes('/api/events') && !r.includes('newer_than'));
    expect(unfiltered).toHaveLength(1);
  });

  it('reads a feed holding only event 0 once, however often it is asked again', async () => {
    const up = new ScriptedUpstream([ev(0, 'job_created', '7')], { [url('7')]: job('7') });
    const p = start(up);
    await waitFor(() => p.polls.filter(Boolean).length >= 5, 5000, 'five polls');
    expect(ids(p)).toEqual([0]);
    expect(p.cursors.get('wf')).toEqual({ eventId: 0, seenAbove: [] });
  });

  it('reads event 0 from a stored cursor of 0 (a reset to earliest), not from a stored cursor past it', async () => {
    const events = [ev(0, 'job_created', '7'), ev(1, 'job_updated', '7')];
    const reset = start(new ScriptedUpstream(events, { [url('7')]: job('7') }), {}, undefined, { cursor: 0 });
    await waitFor(() => ids(reset).length === 2, 5000, 'both changes');
    expect(ids(reset)).toEqual([0, 1]);
    const up = new ScriptedUpstream([...events, ev(2, 'job_updated', '7')], { [url('7')]: job('7') });
    const later = start(up, {}, undefined, { cursor: 1 });
    await waitFor(() => ids(later).length === 1 && later.polls.length >= 3, 5000, 'one change, more polls');
    expect(ids(later)).toEqual([2]);
    expect(up.requests.filter((r) => r.includes('/api/events') && !r.includes('newer_than'))).toEqual([]);
  });

  it('does not look for event 0 from a numeric start_from', async () => {
    const up = new ScriptedUpstream([ev(0, 'job_created', '7'), ev(1, 'job_updated', '7')], {
      [url('7')]: job('7'),
    });
    const p = start(up, { start_from: 0 });
    await waitFor(() => ids(p).length === 1 && p.polls.length >= 3, 5000, 'one change, more polls');
    expect(ids(p)).toEqual([1]);
    expect(up.requests.filter((r) => r.includes('/api/events') && !r.includes('newer_than'))).toEqual([]);
  });

  it('refuses a page with an event timestamped beyond the horizon, counting it, and commits nothing', async () => {
    const up = new ScriptedUpstream(
      [ev(1, 'job_updated', '7'), { ...ev(2, 'job_updated', '7'), timestamp: '9999-01-01T00:00:00Z' }],
      { [url('7')]: job('7') },
    );
    const p = start(up);
    await waitFor(() => p.errors.length >= 2, 10_000, 'failed polls');
    expect(p.queue.commits).toHaveLength(0);
    expect(p.errors[0]).toMatch(
      /^refused GET http:\/\/upstream\.test\/wf\/api\/events\?newer_than=0: feed entry 1: event 2 has timestamp "9999-01-01T00:00:00Z", more than 24 h ahead/,
    );
    expect(p.refusals.slice(0, 2)).toEqual(['invalid_event', 'invalid_event']);
  });

  it('raises the cursor rule bound when a full page shows more disorder, losing nothing', async () => {
    // Listed in reversed blocks of 11: up to 10 places from id order, twice the workflow bound.
    const listing: Resource[] = [];
    for (let b = 0; b < 20; b++)
      for (let i = 10; i >= 0; i--) listing.push(ev(b * 11 + i + 1, 'job_updated', String((b * 11 + i) % 9)));
    const subjects = Object.fromEntries(
      Array.from({ length: 9 }, (_, n) => [url(String(n)), job(String(n))]),
    );
    const p = start(new ScriptedUpstream(listing, subjects));
    await waitFor(() => ids(p).length >= 220, 10_000, 'all changes');
    await new Promise((r) => setTimeout(r, 100));
    expect([...ids(p)].sort((a, b) => a - b)).toEqual(Array.from({ length: 220 }, (_, i) => i + 1));
    expect(p.anomalies.some((a) => a.startsWith('disorder:'))).toBe(true);
  });

  it('finds an event the cursor rule passed over by re-reading behind the cursor, and delivers it late', async () => {
    // Event 30 is listed after 58: no page read after newer_than=0 shows it, and the first page
    // (8..29, 31..58, in id order: nothing on it looks wrong) moves the cursor past it.
    const order = [...range(8, 29), ...range(31, 58), 30, 59, 60];
    const up = new ScriptedUpstream(
      order.map((id) => ev(id, 'job_updated', '7')),
      { [url('7')]: job('7') },
    );
    const p = start(up, {}, 50);
    await waitFor(() => ids(p).includes(30), 10_000, 'the passed-over event');
    await new Promise((r) => setTimeout(r, 200));
    expect([...ids(p)].sort((a, b) => a - b)).toEqual(range(8, 60));
    expect(p.anomalies).toEqual(['disorder:30']);
  });

  it('fails the page, naming the event, when a subject is forbidden (403), instead of retrying it forever', async () => {
    const up = new ScriptedUpstream([ev(1, 'job_updated', '7')], { [url('7')]: job('7') });
    let forbidden = true;
    up.get = async (u: string, o) => {
      if (o.kind === 'subject' && forbidden) throw new UpstreamHttpError(u, 403, 'client error');
      return ScriptedUpstream.prototype.get.call(up, u, o);
    };
    const p = start(up);
    await waitFor(() => p.errors.length >= 2, 10_000, 'failed polls');
    expect(p.queue.commits).toHaveLength(0);
    expect(p.errors[0]).toContain('subject of event 1 (job_updated): HTTP 403');
    forbidden = false;
    await waitFor(() => ids(p).length === 1, 10_000, 'delivered once allowed');
  });

  it('counts event types the specs do not list under one metric label', async () => {
    const up = new ScriptedUpstream(
      Array.from({ length: 30 }, (_, i) => ev(i + 1, `made_up_${i}`, '7')),
      { [url('7')]: job('7') },
    );
    const p = start(up);
    await waitFor(() => ids(p).length === 30, 5000, 'all changes');
    // Log lines and events stop at 20 new types; every event is still delivered.
    expect(p.unknown).toHaveLength(20);
  });
});

describe('memory per page and undecodable subjects', () => {
  const KiB = 1024;
  const ids = (p: { queue: MemoryQueue }) => p.queue.changes.map((c) => c.event_id);
  const big = (n: string, chars: number): Resource => ({ ...job(n), name: 'x'.repeat(chars) });

  it('refuses a page whose subjects need more than max_page_bytes, naming the event and the limit; delivers it once they fit', async () => {
    const events = [ev(1, 'job_updated', '7'), ev(2, 'job_updated', '8'), ev(3, 'job_updated', '9')];
    const up = new ScriptedUpstream(events, {
      [url('7')]: big('7', 60 * KiB),
      [url('8')]: big('8', 60 * KiB),
      [url('9')]: big('9', 60 * KiB),
    });
    const p = start(up, { max_body_bytes: 64 * KiB, max_page_bytes: 128 * KiB, max_change_bytes: 64 * KiB });
    const refused: string[] = [];
    p.events.on('page:refused', (e) => refused.push(`${e.source}:${e.limit}`));
    await waitFor(() => p.errors.length >= 2, 10_000, 'refused pages');
    expect(p.errors[0]).toMatch(
      /page refused: the subject of event 3 \(.*jobs\/9\) may need up to 65536 bytes more/,
    );
    expect(p.errors[0]).toMatch(/max_page_bytes is 131072/);
    expect(refused[0]).toBe('wf:max_page_bytes');
    expect(p.queue.commits).toHaveLength(0);
    // Healed: small subjects, the same page goes through whole.
    for (const n of ['7', '8', '9']) up.subjects[url(n)] = job(n);
    await waitFor(() => ids(p).length === 3, 10_000, 'the page delivered');
    expect(ids(p)).toEqual([1, 2, 3]);
  });

  it('stops the source on a subject over a decoding limit by default: slowly, naming event, type, URL and the ways on', async () => {
    const events = [ev(1, 'job_updated', '7'), ev(2, 'job_created', '8'), ev(3, 'job_updated', '7')];
    const up = new ScriptedUpstream(events, { [url('7')]: job('7') });
    up.get = async (u: string, o) => {
      if (u === url('8'))
        throw new UpstreamRefusedError(u, 'too_deep', 'JSON nesting is deeper than 64 levels');
      return ScriptedUpstream.prototype.get.call(up, u, o);
    };
    const p = start(up, { poll_interval_ms: 200 });
    const stopped: string[] = [];
    p.events.on('subject:undecodable', (e) => stopped.push(e.action));
    const errors: unknown[] = [];
    p.events.on('poll:finished', (e) => errors.push(e.error));
    await new Promise((r) => setTimeout(r, 1100));
    expect(errors[0]).toBeInstanceOf(UndecodableSubjectError);
    expect(p.errors[0]).toContain('source wf stopped at event 2 (job_created)');
    expect(p.errors[0]).toContain(url('8'));
    expect(p.errors[0]).toContain(
      `never be decoded (too_deep): refused GET ${url('8')}: JSON nesting is deeper than 64 levels`,
    );
    expect(p.errors[0]).toContain('on_undecodable_subject');
    expect(p.errors[0]).toContain('feedsync cursor set wf 2');
    // Retried like wrong credentials: at most once per poll interval, never a tight loop.
    expect(p.errors.length).toBeGreaterThanOrEqual(2);
    expect(p.errors.length).toBeLessThanOrEqual(6);
    expect(stopped.every((a) => a === 'stopped') && stopped.length === p.errors.length).toBe(true);
    // Nothing of the page, nothing after it.
    expect(p.queue.commits).toHaveLength(0);
  });

  it('with deliver_unreadable, delivers the change as unreadable with the reason, and the events after it', async () => {
    const events = [ev(1, 'job_updated', '7'), ev(2, 'job_created', '8'), ev(3, 'job_updated', '7')];
    const up = new ScriptedUpstream(events, { [url('7')]: job('7') });
    up.get = async (u: string, o) => {
      if (u === url('8'))
        throw new UpstreamRefusedError(
          u,
          'too_many_values',
          'JSON body holds more than 200000 keys and values',
        );
      return ScriptedUpstream.prototype.get.call(up, u, o);
    };
    const p = start(up, { on_undecodable_subject: 'deliver_unreadable' });
    const counted: number[] = [];
    p.events.on('subject:undecodable', (e) => e.action === 'delivered_unreadable' && counted.push(e.count));
    await waitFor(() => ids(p).length === 3, 5000, 'three changes');
    const [, unreadable] = p.queue.changes;
    expect(unreadable).toMatchObject({
      event_id: 2,
      subject_state: 'unreadable',
      subject: null,
      subject_url: url('8'),
      subject_error: 'too_many_values: JSON body holds more than 200000 keys and values',
    });
    for (const c of p.queue.changes) assertValidChange(c);
    expect(p.queue.changes.map((c) => c.subject_state)).toEqual(['present', 'unreadable', 'present']);
    expect(counted).toEqual([1]);
    expect(p.errors).toEqual([]);
  });

  it('holds a change over max_change_bytes to the same policy: stop, or deliver it unreadable', async () => {
    const events = [ev(1, 'job_updated', '7'), ev(2, 'job_updated', '8')];
    const subjects = { [url('7')]: job('7'), [url('8')]: big('8', 70 * KiB) };
    const limits = { max_body_bytes: 128 * KiB, max_change_bytes: 64 * KiB };

    const stopped = start(new ScriptedUpstream(events, subjects), limits);
    const refused: string[] = [];
    stopped.events.on('page:refused', (e) => refused.push(e.limit));
    await waitFor(() => stopped.errors.length >= 1, 5000, 'a stopped page');
    expect(stopped.errors[0]).toMatch(/source wf stopped at event 2 \(job_updated\)/);
    expect(stopped.errors[0]).toMatch(
      /never be decoded \(max_change_bytes\): the change of subject \S+jobs\/8 is \d+ bytes, over max_change_bytes \(65536\)/,
    );
    expect(refused).toContain('max_change_bytes');
    expect(stopped.queue.commits).toHaveLength(0);

    const delivered = start(new ScriptedUpstream(events, subjects), {
      ...limits,
      on_undecodable_subject: 'deliver_unreadable',
    });
    await waitFor(() => ids(delivered).length === 2, 5000, 'both changes');
    const change = delivered.queue.changes[1]!;
    expect(change.subject_state).toBe('unreadable');
    expect(change.subject).toBeNull();
    expect(change.subject_error).toMatch(
      /^max_change_bytes: the change is \d+ bytes, over max_change_bytes \(65536\)$/,
    );
    assertValidChange(change);
  });
});

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}
