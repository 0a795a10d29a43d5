import { afterEach, describe, expect, it } from 'vitest';
import { createLiveness, createReadiness } from '../../src/observability/health.js';
import { PipelineEvents } from '../../src/core/events.js';
import { UndecodableSubjectError } from '../../src/core/errors.js';
import { startStack } from './stack.js';

type Stack = Awaited<ReturnType<typeof startStack>>;
let stack: Stack | undefined;
afterEach(async () => {
  await stack?.close();
  stack = undefined;
});

function failPoll(s: Stack, source: string): void {
  s.events.emit('poll:finished', {
    source,
    ok: false,
    durationSeconds: 0.1,
    pageSize: 0,
    behind: false,
    error: new Error(`HTTP 503 on GET http://alice:S3cr3t-pw@127.0.0.1:4010/${source}/api/events`),
  });
}

function okPoll(s: Stack, source: string): void {
  s.events.emit('poll:finished', { source, ok: true, durationSeconds: 0.1, pageSize: 3, behind: false });
}

describe('/readyz', () => {
  it('turns 503 after 5 consecutive failed polls of a source and back to 200 on the next ok poll', async () => {
    stack = await startStack();
    expect(await stack.get('/readyz')).toMatchObject({ status: 200, body: '{"ready":true}' });

    for (let i = 0; i < 4; i++) failPoll(stack, 'workflow');
    expect((await stack.get('/readyz')).status).toBe(200);
    // An ok poll in between restarts the count.
    okPoll(stack, 'workflow');
    for (let i = 0; i < 4; i++) failPoll(stack, 'workflow');
    expect((await stack.get('/readyz')).status).toBe(200);

    failPoll(stack, 'workflow');
    const res = await stack.get('/readyz');
    expect(res.status).toBe(503);
    expect(res.contentType).toBe('application/json; charset=utf-8');
    const body = JSON.parse(res.body) as { ready: boolean; reasons: string[] };
    expect(body.ready).toBe(false);
    expect(body.reasons).toHaveLength(1);
    expect(body.reasons[0]).toContain('source "workflow" failed its last 5 polls');
    expect(body.reasons[0]).toContain('HTTP 503');
    expect(res.body).not.toContain('S3cr3t-pw');

    // Other sources do not affect it.
    okPoll(stack, 'scheduling');
    expect((await stack.get('/readyz')).status).toBe(503);

    okPoll(stack, 'workflow');
    expect(await stack.get('/readyz')).toMatchObject({ status: 200, body: '{"ready":true}' });
  });

  it('turns 503 at the first poll of a source stopped on an undecodable subject, naming the event, until a poll succeeds', async () => {
    stack = await startStack();
    const stopped = new UndecodableSubjectError(
      'workflow',
      7013,
      'job_updated',
      'too_deep',
      'refused GET http://127.0.0.1:4010/api/work_areas/1/jobs/913: JSON nesting is deeper than 64 levels',
    );
    stack.events.emit('poll:finished', {
      source: 'workflow',
      ok: false,
      durationSeconds: 0.1,
      pageSize: 0,
      behind: false,
      error: stopped,
    });
    const res = await stack.get('/readyz');
    expect(res.status).toBe(503);
    const reasons = (JSON.parse(res.body) as { reasons: string[] }).reasons;
    expect(reasons).toHaveLength(1);
    expect(reasons[0]).toContain(
      'source "workflow" is stopped: source workflow stopped at event 7013 (job_updated)',
    );
    expect(reasons[0]).toContain('/api/work_areas/1/jobs/913');
    expect(reasons[0]).toContain('feedsync cursor set workflow 7013');
    okPoll(stack, 'workflow');
    expect((await stack.get('/readyz')).status).toBe(200);
  });

  it('is 503 naming each failing, throwing or hanging check', async () => {
    let storeOpen = true;
    stack = await startStack({
      checks: {
        store: () => storeOpen,
        redis: async () => {
          throw new Error('connect ECONNREFUSED redis://:S3cr3t-pw@127.0.0.1:6379');
        },
      },
    });
    let res = await stack.get('/readyz');
    expect(res.status).toBe(503);
    let body = JSON.parse(res.body) as { reasons: string[] };
    expect(body.reasons).toEqual([expect.stringMatching(/^check "redis" failed: connect ECONNREFUSED/)]);
    expect(res.body).not.toContain('S3cr3t-pw');

    storeOpen = false;
    res = await stack.get('/readyz');
    body = JSON.parse(res.body) as { reasons: string[] };
    expect(body.reasons).toContain('check "store" failed');
    expect(body.reasons).toHaveLength(2);
  });

  it('treats a check that never answers as failed instead of hanging', async () => {
    const readiness = createReadiness({
      events: new PipelineEvents(),
      sources: [],
      checks: { redis: () => new Promise<boolean>(() => {}), store: () => true },
      checkTimeoutMs: 100,
    });
    const started = Date.now();
    expect(await readiness.status()).toEqual({
      ready: false,
      reasons: ['check "redis" did not answer within 100 ms'],
    });
    expect(Date.now() - started).toBeLessThan(2000);
    readiness.close();
  });
});

describe('/healthz, /metrics routing', () => {
  it('answers 200 on /healthz, 404 elsewhere, 405 for other methods', async () => {
    stack = await startStack({ checks: { redis: () => false } });
    expect(await stack.get('/healthz')).toMatchObject({ status: 200, body: '{"status":"ok"}' });
    expect((await stack.get('/metrics?name=x')).status).toBe(200);
    expect((await stack.get('/nope')).status).toBe(404);
    expect((await stack.get('/')).status).toBe(404);
    const post = await fetch(`${stack.base}/metrics`, { method: 'POST' });
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET, HEAD');
  });

  it('close() is idempotent and frees the port', async () => {
    stack = await startStack();
    const base = stack.base;
    await Promise.all([stack.close(), stack.close()]);
    await stack.close();
    stack = undefined;
    await expect(fetch(`${base}/healthz`)).rejects.toThrow();
  });
});

describe('liveness', () => {
  it('is alive while the event loop ticks and not alive when it is blocked', async () => {
    const liveness = createLiveness({ tickMs: 10, staleAfterMs: 150 });
    try {
      await new Promise((r) => setTimeout(r, 50));
      expect(liveness.alive()).toBe(true);
      const until = Date.now() + 250;
      while (Date.now() < until) {
        // Block the loop so the ticker cannot run.
      }
      expect(liveness.alive()).toBe(false);
      await new Promise((r) => setTimeout(r, 50));
      expect(liveness.alive()).toBe(true);
    } finally {
      liveness.close();
    }
  });
});
