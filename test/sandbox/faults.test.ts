import { XMLValidator } from 'fast-xml-parser';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { FaultKind } from '../../src/sandbox/index.js';
import { harness, type Harness } from './helpers.js';

describe('sandbox fault injection', () => {
  let h: Harness;
  let feed: string;
  let subject: string;
  beforeAll(async () => {
    h = await harness({ seed: 5, backlog: 300 });
    feed = `${h.base.scheduling}/api/events?newer_than=0&expand=subject`;
    subject = Object.keys(h.sb.liveState('scheduling'))[0]!;
    await h.client.get(`${h.base.scheduling}/api`); // take the challenge before faults are on
  });
  afterAll(() => h.sb.close());
  beforeEach(() => {
    h.sb.setFaults({ rate: 0 });
    h.sb.resetStats();
  });

  const only = (kind: FaultKind, paths: 'all' | 'feed' | 'subject' = 'all') =>
    h.sb.setFaults({ rate: 1, kinds: [kind], paths });

  it.each([
    ['status_500', 500],
    ['status_503', 503],
    ['status_429', 429],
  ] as const)('%s answers %i without Retry-After', async (kind, status) => {
    only(kind);
    const res = await h.client.get(feed);
    expect(res.status).toBe(status);
    expect(res.headers.get('retry-after')).toBeNull();
    expect(h.sb.stats().scheduling.faults[kind]).toBe(1);
    expect(h.sb.stats().scheduling.statuses[String(status)]).toBe(1);
  });

  it('status_429_retry_after sends Retry-After: 1', async () => {
    only('status_429_retry_after');
    const res = await h.client.get(feed);
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBe('1');
  });

  it('hang never answers until the client gives up', async () => {
    only('hang');
    const started = Date.now();
    await expect(h.client.get(feed, { timeoutMs: 300 })).rejects.toThrow();
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    expect(h.sb.stats().scheduling.faults.hang).toBe(1);
  });

  it('truncated promises a full body and drops the connection half way', async () => {
    only('truncated');
    const res = await h.client.get(feed, { accept: 'application/json' });
    expect(res.status).toBe(200);
    expect(Number(res.headers.get('content-length'))).toBeGreaterThan(100);
    await expect(res.text()).rejects.toThrow();
  });

  it('malformed sends a cut document with status 200 in the asked format', async () => {
    only('malformed');
    const json = await h.client.get(feed, { accept: 'application/json' });
    expect(json.status).toBe(200);
    expect(json.headers.get('content-type')).toBe('application/json; charset=utf-8');
    const text = await json.text();
    expect(() => JSON.parse(text)).toThrow();
    const xml = await h.client.get(subject, { accept: 'application/xml' });
    expect(xml.headers.get('content-type')).toBe('application/xml; charset=utf-8');
    expect(XMLValidator.validate(await xml.text())).not.toBe(true);
  });

  it('html_200 sends an HTML error page with status 200', async () => {
    only('html_200');
    const res = await h.client.get(feed, { accept: 'application/json' });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    expect(await res.text()).toContain('<html>');
  });

  it('paths limits faults to the feed or to subjects; auth is checked first', async () => {
    only('status_500', 'subject');
    expect((await h.client.get(feed)).status).toBe(200);
    expect((await h.client.get(subject)).status).toBe(500);
    only('status_503', 'feed');
    expect((await h.client.get(subject)).status).toBe(200);
    expect((await h.client.get(feed)).status).toBe(503);
    expect((await fetch(feed)).status).toBe(401);
    expect(h.sb.stats().scheduling.faults).toMatchObject({ status_500: 1, status_503: 1 });
  });

  it('a partial rate faults roughly that share of requests, with the enabled kinds only', async () => {
    h.sb.setFaults({ rate: 0.5, kinds: ['status_500', 'status_503'] });
    const statuses: number[] = [];
    for (let i = 0; i < 120; i++) statuses.push((await h.client.get(`${h.base.workflow}/api/events`)).status);
    const faulted = statuses.filter((s) => s !== 200);
    expect(faulted.length).toBeGreaterThan(30);
    expect(faulted.length).toBeLessThan(90);
    expect(new Set(faulted)).toEqual(new Set([500, 503]));
    const { faults } = h.sb.stats().workflow;
    expect(faults.status_500 + faults.status_503).toBe(faulted.length);
  });

  it('rejects an invalid fault configuration naming the key', () => {
    expect(() => h.sb.setFaults({ rate: 2 })).toThrow(/faults\.rate/);
    expect(() => h.sb.setFaults({ rate: 0.1, kinds: ['explode' as FaultKind] })).toThrow(
      /faults\.kinds\[0\]/,
    );
  });

  it('close() ends hanging requests and is idempotent', async () => {
    const other = await harness({ backlog: 5, faultRate: 1, faultKinds: ['hang'] });
    const pending = other.client.get(`${other.base.workflow}/api/events`, { timeoutMs: 5000 });
    const pendingOutcome = pending.then(
      () => 'answered',
      () => 'ended',
    );
    await new Promise((r) => setTimeout(r, 150));
    const started = Date.now();
    await Promise.all([other.sb.close(), other.sb.close()]);
    expect(await pendingOutcome).toBe('ended');
    expect(Date.now() - started).toBeLessThan(2000);
  });
});
