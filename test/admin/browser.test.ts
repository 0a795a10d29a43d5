// The console in a real browser (Debian's chromium through puppeteer-core) against a real
// `feedsync run` child: an operator logs in, finds the failing webhook sink, fixes the receiver,
// retries its dead letters from the page and sees them delivered. The upstream is hostile: event
// types and subject names written as HTML must reach the page as inert text.
import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { writeFileSync } from 'node:fs';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir, waitFor } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig, type CliProcess } from '../support/process.js';
import {
  Feed,
  HostileUpstream,
  healthyReply,
  jsonReply,
  PASSWORD,
  subjectPath,
  USERNAME,
  type EventSpec,
} from '../hostile/support.js';
import { call } from './support.js';

// The functions handed to the page run in the browser, where these exist (the tests' lib has no DOM).
declare const document: any;
declare const window: any;
type HTMLElement = { innerText: string };

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const TOKEN = 'browser-test-write-token-5b1e';
/** Run by the page if any upstream text were ever parsed as HTML. */
const IMG_TYPE = '<img src=x onerror="window.__pwned=1">';
const SCRIPT_NAME = 'Night shift</script><script>window.__pwned=2</script>';
const ERROR_BODY = 'receiver down <b onmouseover="window.__pwned=3">maintenance</b>';

const events: EventSpec[] = [
  ...[1, 2, 3].map((id) => ({
    id,
    type: 'job_updated',
    subject: subjectPath('workflow', 100 + id),
    changes: 'name',
  })),
  { id: 4, type: IMG_TYPE, subject: subjectPath('workflow', 104) },
  { id: 5, type: IMG_TYPE, subject: subjectPath('workflow', 105) },
  { id: 6, type: 'job_created', subject: subjectPath('workflow', 666) },
];

let upstream: HostileUpstream;
let receiver: Server;
let receiverUp = false;
const received: string[] = [];
let daemon: CliProcess;
let admin: { url: string };
let browser: Browser;

beforeAll(async () => {
  const feed = new Feed('workflow', events);
  upstream = await HostileUpstream.start({
    name: 'browser',
    mode: 'healed',
    handler: (ctx) =>
      ctx.path === subjectPath('workflow', 666)
        ? jsonReply(
            JSON.stringify({
              resource_type: 'job',
              id: 666,
              name: SCRIPT_NAME,
              self_link: ctx.origin + ctx.path,
            }),
          )
        : healthyReply(ctx, feed),
  });
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (!receiverUp) {
        res.writeHead(503, { 'content-type': 'text/plain' });
        return res.end(ERROR_BODY);
      }
      received.push((JSON.parse(Buffer.concat(chunks).toString('utf8')) as { key: string }).key);
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const dir = tempDir('feedsync-admin-browser-');
  writeFileSync(join(dir, 'admin.token'), TOKEN);
  const file = writeConfig(dir, {
    store: { path: join(dir, 'feedsync.db') },
    queue: { driver: 'local', attempts: 2, backoff_ms: 20, max_backoff_ms: 50 },
    sources: [
      {
        name: 'jobs',
        service: 'workflow',
        base_url: upstream.origin,
        username: USERNAME,
        password: PASSWORD,
        start_from: 'earliest',
        poll_interval_ms: 100,
      },
    ],
    sinks: [
      {
        name: 'hook',
        type: 'webhook',
        url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/changes`,
        timeout_ms: 2000,
      },
    ],
    http: { host: '127.0.0.1', port: 0 },
    admin: { enabled: true, host: '127.0.0.1', port: 0, token_file: 'admin.token' },
    log: { level: 'info' },
  });
  daemon = spawnCli(['--config', file, 'run']);
  const started = await daemon.waitForLog((l) => l.msg === 'feedsync started', 20_000, 'feedsync started');
  admin = { url: `http://127.0.0.1:${started.admin_port as number}` };
  await waitFor(
    async () => (await call(admin, TOKEN, 'GET', '/api/v1/sinks')).body?.sinks?.[0]?.dead === events.length,
    60_000,
    'every change dead-lettered by the failing receiver',
  );
  if (!existsSync(CHROMIUM))
    throw new Error(`no chromium at ${CHROMIUM} (scripts/ensure-test-deps.sh installs it)`);
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
  });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await daemon?.stop();
  await killAllCli();
  await upstream?.close();
  await new Promise((r) => receiver?.close(r));
});

/** The page's visible text of every element matching `selector`. */
const texts = (page: Page, selector: string) =>
  page.$$eval(selector, (els) => els.map((e) => (e as HTMLElement).innerText));

describe('the console in chromium', () => {
  it('logs in, finds the failing webhook sink, retries its dead letters after the fix and sees them delivered', async () => {
    const page = await browser.newPage();
    const problems: string[] = [];
    page.on('pageerror', (err) => problems.push(`page error: ${(err as Error).message}`));
    page.on('console', (m) => {
      // The first question, "is there a session?", is answered 401 before the login.
      const first = m.location().url?.endsWith('/api/v1/session') && m.text().includes('401');
      if (m.type() === 'error' && !first) problems.push(`console: ${m.text()} (${m.location().url})`);
    });
    await page.goto(`${admin.url}/`);
    await page.waitForSelector('#login input[name=token]');
    await page.type('#login input[name=token]', TOKEN);
    await page.click('#login button[type=submit]');

    // Overview: the sink, its dead letters, its state.
    await page.waitForSelector('#overview tr[data-sink="hook"]');
    const row = await page.$eval('#overview tr[data-sink="hook"]', (tr) => (tr as HTMLElement).innerText);
    expect(row).toMatch(/hook\s+(failing|live)\s+0\s+0\s+6\s/);
    expect(await texts(page, '#overview tr[data-source="jobs"]')).toEqual([
      expect.stringContaining('caught up'),
    ]);
    expect(await page.$('#overview tr[data-sink="hook"] svg.rate polyline')).not.toBeNull();

    // The sink's page: why it fails, in the receiver's words, as text.
    await page.click('#overview tr[data-sink="hook"] a[href^="#/sink"]');
    await page.waitForFunction(() =>
      document.querySelector('#sink td.error')?.textContent?.includes('HTTP 503'),
    );
    expect((await texts(page, '#sink td.error'))[0]).toContain(ERROR_BODY);

    // Its dead letters: hostile event types shown as the text they are.
    await page.goto(`${admin.url}/#/dead-letters?sink=hook`);
    await page.waitForSelector('#dead-letters tr[data-id]');
    await page.waitForFunction(() => document.querySelectorAll('#dead-letters tr[data-id]').length === 6);
    expect((await texts(page, '#dead-letters td.event-type')).filter((t) => t === IMG_TYPE)).toHaveLength(2);
    await page.click('#dead-letters tr[data-id="hook/jobs:6"] button');
    await page.waitForSelector('#detail pre.change');
    expect(await page.$eval('#detail pre.change', (e) => e.textContent)).toContain(
      JSON.stringify(SCRIPT_NAME).slice(1, -1),
    );

    // The fix, then the retry: the confirmation states the count.
    receiverUp = true;
    for (const box of await page.$$('#dead-letters tr[data-id] input[type=checkbox]')) await box.click();
    await page.click('#retry-selected');
    await page.waitForSelector('#confirm[open]');
    expect(await page.$eval('#confirm-text', (e) => e.textContent)).toBe(
      'Re-queue the selected 6 dead letters?',
    );
    await page.click('#confirm-ok');
    await page.waitForFunction(
      () => document.getElementById('notice')?.textContent === 'Re-queued 6 dead letters.',
    );
    await waitFor(() => received.length === 6, 30_000, 'the receiver to get the six retried changes');
    expect(received.sort()).toEqual(events.map((e) => `jobs:${e.id}`).sort());
    await page.waitForFunction(
      () => document.querySelector('#dead-letters td.muted')?.textContent === 'no dead letters',
    );

    // Nothing of the upstream's or the receiver's text ever became markup or ran.
    expect(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
    expect(await page.evaluate(() => document.querySelectorAll('img, b, script:not([src])').length)).toBe(0);
    expect(problems).toEqual([]);
    await page.close();
  }, 120_000);
});
