// `npm run screenshots`: a screenshot of every page of the admin console into docs/images/, from a
// real `feedsync run` (the built dist/) against the sandbox, with a webhook sink whose receiver
// refuses some changes so the dead-letter pages have something to show. Needs chromium
// (scripts/ensure-test-deps.sh installs Debian's) and puppeteer-core (a devDependency).
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';
import { stringify } from 'yaml';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'docs', 'images');
const chromium = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const token = 'screenshots-token';
const { startSandbox } = await import(join(root, 'dist', 'sandbox', 'index.js'));

const dir = mkdtempSync(join(tmpdir(), 'feedsync-screenshots-'));
const sandbox = await startSandbox({ seed: 3, backlog: 120, rate: 1 });
// The receiver refuses every seventh change (HTTP 422: a dead letter at once) and takes the rest.
const receiver = createServer((req, res) => {
  let body = '';
  req.on('data', (c) => (body += c));
  req.on('end', () => {
    const { event_id: id } = JSON.parse(body);
    if (id % 7 === 0) res.writeHead(422, { 'content-type': 'text/plain' }).end('unknown job state');
    else res.writeHead(204).end();
  });
});
await new Promise((r) => receiver.listen(0, '127.0.0.1', r));
writeFileSync(join(dir, 'admin.token'), token);
const config = {
  store: { path: join(dir, 'feedsync.db') },
  queue: { driver: 'local', attempts: 2, backoff_ms: 50, max_backoff_ms: 200 },
  sources: ['scheduling', 'workflow'].map((service) => ({
    name: service,
    service,
    base_url: service === 'scheduling' ? sandbox.schedulingBaseUrl : sandbox.workflowBaseUrl,
    username: sandbox.username,
    password: sandbox.password,
    start_from: 'earliest',
    poll_interval_ms: 500,
  })),
  sinks: [
    { name: 'archive', type: 'jsonl', path: join(dir, 'changes.jsonl') },
    { name: 'webhook', type: 'webhook', url: `http://127.0.0.1:${receiver.address().port}/feedsync` },
  ],
  http: { host: '127.0.0.1', port: 0 },
  admin: { enabled: true, host: '127.0.0.1', port: 0, token_file: 'admin.token' },
  log: { level: 'info' },
};
writeFileSync(join(dir, 'feedsync.yaml'), stringify(config));
const daemon = spawn(
  process.execPath,
  [join(root, 'dist', 'cli.js'), '--config', join(dir, 'feedsync.yaml'), 'run'],
  {
    stdio: ['ignore', 'pipe', 'inherit'],
  },
);
const adminPort = await new Promise((resolve, reject) => {
  let buffered = '';
  const timer = setTimeout(() => reject(new Error('feedsync run did not start within 30 s')), 30_000);
  daemon.stdout.on('data', (chunk) => {
    buffered += chunk;
    for (const line of buffered.split('\n')) {
      if (!line.includes('"feedsync started"')) continue;
      clearTimeout(timer);
      resolve(JSON.parse(line).admin_port);
    }
    buffered = buffered.slice(buffered.lastIndexOf('\n') + 1);
  });
  daemon.once('exit', (code) => reject(new Error(`feedsync run exited (${code})`)));
});
const base = `http://127.0.0.1:${adminPort}`;

let browser;
try {
  // Until the backlog is delivered and the refused changes are dead letters.
  for (let i = 0; i < 120; i++) {
    const res = await globalThis.fetch(`${base}/api/v1/status`, {
      headers: { authorization: `Bearer ${token}` },
    });
    const status = await res.json();
    const hook = status.sinks.find((s) => s.sink === 'webhook');
    if (hook && hook.dead >= 30 && hook.queued === 0) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu'],
  });
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 860, deviceScaleFactor: 1 });
  mkdirSync(out, { recursive: true });
  const shot = async (name) => {
    await new Promise((r) => setTimeout(r, 400));
    await page.screenshot({ path: join(out, `admin-${name}.png`) });
    process.stdout.write(`docs/images/admin-${name}.png\n`);
  };
  await page.goto(`${base}/`);
  await page.waitForSelector('#login input[name=token]');
  await shot('login');
  await page.type('#login input[name=token]', token);
  await page.click('#login button[type=submit]');
  await page.waitForSelector('#overview tr[data-sink="webhook"]');
  await shot('overview');
  await page.goto(`${base}/#/sink?name=webhook`);
  await page.waitForSelector('#sink table');
  await shot('sink');
  await page.goto(`${base}/#/dead-letters?sink=webhook`);
  await page.waitForSelector('#dead-letters tr[data-id] button');
  await page.click('#dead-letters tr[data-id] button');
  await page.waitForSelector('#detail pre.change');
  await shot('dead-letters');
  await page.goto(`${base}/#/replay`);
  await page.waitForSelector('#replay select option');
  await shot('replay');
  await page.goto(`${base}/#/cursors`);
  await page.waitForSelector('#cursor select option');
  await shot('cursors');
} finally {
  await browser?.close();
  daemon.kill('SIGTERM');
  await new Promise((r) => daemon.once('exit', r));
  receiver.close();
  await sandbox.close();
  rmSync(dir, { recursive: true, force: true });
}
