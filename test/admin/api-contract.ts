// The admin API's contract (docs/admin.md), run once per queue driver (local.test.ts,
// bullmq.test.ts): what each route answers, that its JSON is the CLI's `--json` shape (the same
// functions make both), and that its changes reach the queue.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openOps } from '../../src/commands/admin.js';
import { deadLetterJson } from '../../src/commands/dlq.js';
import { readStatus } from '../../src/commands/status.js';
import { waitFor } from '../support/harness.js';
import {
  call,
  HOOK_ERRORS,
  openAdminFixture,
  serveAdmin,
  type AdminFixture,
  type AdminHarness,
} from './support.js';

export function describeAdminApi(name: string, harness: AdminHarness): void {
  describe(`${name}: admin API contract`, () => {
    let f: AdminFixture;
    const get = (path: string) => call(f, f.readToken, 'GET', path);
    const post = (path: string, body: unknown) => call(f, f.writeToken, 'POST', path, body);
    const deadKeys = async (query = '') => {
      const keys: string[] = [];
      for (let cursor: string | null = '0'; cursor !== null;) {
        const page = await get(`/api/v1/dead-letters?limit=2&cursor=${cursor}${query}`);
        expect(page.status).toBe(200);
        expect(page.body.dead_letters.length).toBeLessThanOrEqual(2);
        keys.push(...page.body.dead_letters.map((d: { sink: string; key: string }) => `${d.sink}/${d.key}`));
        cursor = page.body.next_cursor;
      }
      return keys.sort();
    };
    const ops = () => ({
      sourceState: f.driver.sourceState!,
      leases: f.driver.leases!,
      admin: f.driver.admin,
      positions: f.driver.positions,
    });

    beforeAll(async () => {
      f = await openAdminFixture(harness);
    }, 60_000);
    afterAll(async () => {
      await f?.close();
    });

    it('GET /api/v1/status is `feedsync status --json`; sources and sinks are its parts', async () => {
      const [status, sources, sinks] = await Promise.all([
        get('/api/v1/status'),
        get('/api/v1/sources'),
        get('/api/v1/sinks'),
      ]);
      const expected = JSON.parse(JSON.stringify(await readStatus(f.config, ops())));
      // Lags in seconds move with the clock; everything else is the same reading.
      const still = (list?: Record<string, unknown>[]) => list?.map((x) => ({ ...x, lag_seconds: null }));
      const steady = (r: typeof expected) => ({
        ...r,
        sources: still(r.sources),
        positions: still(r.positions),
      });
      expect(steady(status.body)).toEqual(steady(expected));
      expect(still(sources.body.sources)).toEqual(still(expected.sources));
      for (const s of sources.body.sources) expect(s).toHaveProperty('lag_seconds');
      expect(
        sources.body.sources.map((s: { source: string; cursor: number }) => [s.source, s.cursor]),
      ).toEqual([
        ['alpha', 3],
        ['beta', 3],
      ]);
      // This process holds both sources (the fixture committed through their leases).
      for (const s of sources.body.sources) expect(s.polled_by).toEqual(expect.any(String));
      expect(sinks.body.sinks).toEqual(expected.sinks);
      expect(sinks.body.sinks.find((s: { sink: string }) => s.sink === 'hook').dead).toBe(6);
      expect(steady(sinks.body).positions).toEqual(steady(expected).positions);
      const hook = sinks.body.activity.find((a: { sink: string }) => a.sink === 'hook');
      expect(hook.failed_per_minute).toHaveLength(60);
      expect(hook.failed_per_minute.reduce((a: number, b: number) => a + b, 0)).toBe(6);
      expect(hook.recent_errors.map((e: { error: string }) => e.error).join('\n')).toContain('TIMEOUT');
      const file = sinks.body.activity.find((a: { sink: string }) => a.sink === 'file');
      expect(file.delivered_per_minute.reduce((a: number, b: number) => a + b, 0)).toBe(6);
    });

    it('pages through dead letters with next_cursor, each in the shape of `dlq list --json`', async () => {
      expect(await deadKeys()).toEqual(f.dead.map((c) => `hook/${c.key}`).sort());
      const first = await get('/api/v1/dead-letters?limit=2');
      expect(first.body.next_cursor).toBe('2');
      expect(first.body.scan_truncated).toBe(false);
      const cli = JSON.parse(JSON.stringify((await f.driver.admin.listDead({}, 2)).map(deadLetterJson)));
      expect(first.body.dead_letters).toEqual(cli);
      expect(Object.keys(first.body.dead_letters[0]).sort()).toEqual(
        ['attempts', 'change', 'error', 'event_type', 'failed_at', 'key', 'sink'].sort(),
      );
    });

    it('filters dead letters by sink, source, event type and error text (case-insensitive, literal)', async () => {
      const keysOf = (source: string, type?: string) =>
        f.dead
          .filter((c) => c.source === source && (type === undefined || c.event_type === type))
          .map((c) => `hook/${c.key}`)
          .sort();
      expect(await deadKeys('&source=alpha')).toEqual(keysOf('alpha'));
      expect(await deadKeys('&sink=hook&source=beta')).toEqual(keysOf('beta'));
      const hostile = '<img src=x onerror=alert(1)>';
      expect(await deadKeys(`&event_type=${encodeURIComponent(hostile)}`)).toEqual(keysOf('beta', hostile));
      expect(await deadKeys('&q=timeout')).toEqual(keysOf('beta', 'title_updated'));
      // A pattern's metacharacters are plain text: nothing matches them.
      expect(await deadKeys(`&q=${encodeURIComponent('.*')}`)).toEqual([]);
      expect(await deadKeys('&sink=file')).toEqual([]);
      const unknown = await get('/api/v1/dead-letters?sink=nope');
      expect(unknown.status).toBe(400);
      expect(unknown.body.error).toContain('unknown sink "nope"');
      expect((await get('/api/v1/dead-letters?limit=x')).status).toBe(400);
    });

    it('GET /api/v1/dead-letters/{id} answers one with its change and last error; 404 when there is none', async () => {
      const change = f.dead[0]!;
      const one = await get(`/api/v1/dead-letters/${encodeURIComponent(`hook/${change.key}`)}`);
      expect(one.status).toBe(200);
      expect(one.body.change).toEqual(change);
      expect(one.body.error).toContain(HOOK_ERRORS.job_failed);
      const none = await get(`/api/v1/dead-letters/${encodeURIComponent('hook/alpha:999')}`);
      expect(none.status).toBe(404);
      expect((await get('/api/v1/dead-letters/no-slash')).status).toBe(400);
    });

    it('never shows a credential: a URL in an error is answered with its userinfo redacted', async () => {
      const page = await get('/api/v1/dead-letters?source=beta');
      expect(page.text).toContain('Bad Gateway from');
      expect(page.text).not.toContain('hunter2');
      expect(page.text).not.toContain('the-source-password');
    });

    it('a dry run counts what a filter selects and changes nothing', async () => {
      const dry = await post('/api/v1/dead-letters/retry', { filter: { source: 'alpha' }, dry_run: true });
      expect(dry.status).toBe(200);
      expect(dry.body).toEqual({ action: 'retry', dry_run: true, count: 3 });
      const dropDry = await post('/api/v1/dead-letters/drop', { filter: {}, dry_run: true });
      expect(dropDry.body.count).toBe(6);
      expect((await f.driver.admin.counts()).hook?.dead).toBe(6);
      const ids = await post('/api/v1/dead-letters/drop', {
        ids: [`hook/${f.dead[0]!.key}`, 'hook/alpha:999'],
        dry_run: true,
      });
      expect(ids.body.count).toBe(1);
    });

    it('retries selected ids; once the receiver is fixed they are delivered and leave the dead letters', async () => {
      f.heal();
      const [a, b] = f.dead;
      const retried = await post('/api/v1/dead-letters/retry', { ids: [`hook/${a!.key}`, `hook/${b!.key}`] });
      expect(retried.status).toBe(200);
      expect(retried.body).toEqual({ action: 'retry', dry_run: false, count: 2 });
      await waitFor(
        () => [a, b].every((c) => f.hook.keys().includes(c!.key)),
        20_000,
        'the retried changes delivered to hook',
      );
      expect(await deadKeys()).toEqual(
        f.dead
          .slice(2)
          .map((c) => `hook/${c.key}`)
          .sort(),
      );
    });

    it('drops what a filter selects (event type), the others stay', async () => {
      const dropped = await post('/api/v1/dead-letters/drop', {
        filter: { sink: 'hook', event_type: '<img src=x onerror=alert(1)>' },
      });
      expect(dropped.body).toEqual({ action: 'drop', dry_run: false, count: 2 });
      expect(await deadKeys()).toEqual([`hook/${f.dead[2]!.key}`, `hook/${f.dead[5]!.key}`].sort());
    });

    it('retries everything a filter selects, the way `dlq retry --all` does', async () => {
      const all = await post('/api/v1/dead-letters/retry', { filter: { sink: 'hook' } });
      expect(all.body.count).toBe(2);
      await waitFor(
        async () => (await f.driver.admin.counts()).hook?.dead === 0,
        20_000,
        'no dead letter left',
      );
      await waitFor(() => f.hook.keys().includes(f.dead[5]!.key), 20_000, 'the last one delivered');
    });

    it('refuses a selection that is neither ids nor a filter, or both, naming the problem', async () => {
      const neither = await post('/api/v1/dead-letters/retry', { dry_run: true });
      expect(neither.status).toBe(400);
      expect(neither.body.error).toContain('either "ids" or "filter"');
      const extra = await post('/api/v1/dead-letters/retry', { filter: {}, everything: true });
      expect(extra.status).toBe(400);
      expect(extra.body.error).toContain('everything');
    });

    it('replays a sink from a point of a source; a second replay while it runs is refused with 409', async () => {
      const started = await post('/api/v1/replay', { sink: 'file', source: 'alpha', from: 'earliest' });
      expect(started.status).toBe(200);
      expect(started.body).toEqual({ replays: [{ sink: 'file', source: 'alpha', from: 0, before: 3 }] });
      const positions = (await get('/api/v1/sinks')).body.positions;
      expect(
        positions.find((p: { sink: string; source: string }) => p.sink === 'file' && p.source === 'alpha'),
      ).toMatchObject({
        state: 'catching_up',
        reason: 'replay',
        position: 0,
      });
      const again = await post('/api/v1/replay', { sink: 'file', source: 'alpha', from: 1 });
      expect(again.status).toBe(409);
      expect(again.body.error).toContain('a replay is still running');
      const unknown = await post('/api/v1/replay', { sink: 'nope', from: 1 });
      expect(unknown.status).toBe(400);
      expect(unknown.body.error).toContain('unknown sink "nope"');
    });

    it('refuses to move a cursor while a poller holds the source: 409 naming the holder, as the CLI', async () => {
      for (const source of ['alpha', 'beta']) {
        const held = await call(f, f.writeToken, 'PUT', `/api/v1/sources/${source}/cursor`, { cursor: 1 });
        expect(held.status).toBe(409);
        expect(held.body.holder).toBe(await f.driver.leases!.holder(source));
        expect(held.body.error).toContain(`a poller holds it (${held.body.holder}); stop it first`);
      }
      expect((await get('/api/v1/cursors')).body.cursors).toEqual([
        { source: 'alpha', cursor: 3 },
        { source: 'beta', cursor: 3 },
      ]);
    });

    it('moves a cursor once no poller holds it (the API over the ops parts, as a `work` replica serves it)', async () => {
      await f.close();
      const ops = await openOps(f.config);
      const served = await serveAdmin(f.config, f.dir, () => Promise.resolve(ops));
      try {
        const put = (source: string, body: unknown) =>
          call(served, f.writeToken, 'PUT', `/api/v1/sources/${source}/cursor`, body);
        const moved = await put('alpha', { cursor: 2 });
        expect(moved.status).toBe(200);
        expect(moved.body).toEqual({ source: 'alpha', before: 3, cursor: 2 });
        const reset = await put('alpha', { reset: true });
        expect(reset.body).toEqual({ source: 'alpha', before: 2, cursor: 0 });
        const cursors = await call(served, f.readToken, 'GET', '/api/v1/cursors');
        expect(cursors.body.cursors).toEqual([
          { source: 'alpha', cursor: 0 },
          { source: 'beta', cursor: 3 },
        ]);
        const unknown = await put('nope', { cursor: 1 });
        expect(unknown.status).toBe(400);
        expect(unknown.body.error).toContain('unknown source "nope"');
        expect((await put('alpha', { cursor: -1 })).status).toBe(400);
        expect((await put('alpha', { reset: false })).status).toBe(400);
      } finally {
        await served.close();
        await ops.close();
      }
    });
  });
}
