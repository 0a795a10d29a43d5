// The daemon as deployed (`feedsync run`, a child process) delivering a sandbox backlog to two
// webhook receivers, each with its own secret in a secret_file (one `whsec_`, one plain), each
// verifying every request with the published `standardwebhooks` library. Every change arrives
// verified at its own receiver only; the deprecation of X-Feedsync-Signature is logged once per sink.
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Webhook } from 'standardwebhooks';
import { afterAll, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { rawConfig, tempDir } from '../support/harness.js';
import { killAllCli, spawnCli, writeConfig } from '../support/process.js';
import { eventually, sandboxKeys, stopGracefully, waitStarted } from '../reliability-bullmq/support.js';

interface Receiver {
  url: string;
  verified: string[];
  rejected: string[];
  close(): Promise<void>;
}

async function startReceiver(webhook: Webhook): Promise<Receiver> {
  const verified: string[] = [];
  const rejected: string[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      try {
        webhook.verify(Buffer.concat(chunks).toString('utf8'), req.headers as Record<string, string>);
      } catch (err) {
        rejected.push(`${String(req.headers['webhook-id'])}: ${(err as Error).message}`);
        res.writeHead(401).end();
        return;
      }
      verified.push(String(req.headers['webhook-id']));
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    verified,
    rejected,
    close: () =>
      new Promise<void>((r) => {
        server.close(() => r());
        server.closeAllConnections();
      }),
  };
}

let sandbox: Sandbox | undefined;
const receivers: Receiver[] = [];
afterAll(async () => {
  await killAllCli();
  await Promise.all(receivers.map((r) => r.close()));
  await sandbox?.close();
});

it('feedsync run signs every request so that the standardwebhooks library verifies it', async () => {
  sandbox = await startSandbox({ seed: 28, backlog: 30, rate: 0 });
  const dir = tempDir('feedsync-webhook-sig-');
  const plain = 'catalog-hook-sécret';
  const whsec = `whsec_${randomBytes(24).toString('base64')}`;
  writeFileSync(join(dir, 'catalog-secret'), `${plain}\n`);
  writeFileSync(join(dir, 'jobs-secret'), `${whsec}\n`);
  const catalog = await startReceiver(new Webhook(`whsec_${Buffer.from(plain).toString('base64')}`));
  const jobs = await startReceiver(new Webhook(whsec));
  receivers.push(catalog, jobs);
  const raw = {
    ...rawConfig(sandbox, dir, {
      sinks: [
        {
          name: 'catalog',
          type: 'webhook',
          url: catalog.url,
          secret_file: './catalog-secret',
          filter: { services: ['scheduling'] },
        },
        {
          name: 'jobs',
          type: 'webhook',
          url: jobs.url,
          secret_file: './jobs-secret',
          filter: { services: ['workflow'] },
        },
      ],
    }),
    log: { level: 'info' },
  };
  const proc = spawnCli(['run'], { config: writeConfig(dir, raw) });
  await waitStarted(proc);
  const want = { catalog: sandboxKeys(sandbox, ['scheduling']), jobs: sandboxKeys(sandbox, ['workflow']) };
  expect(want.catalog.length + want.jobs.length).toBeGreaterThan(0);
  await eventually(
    () =>
      want.catalog.every((k) => catalog.verified.includes(k)) &&
      want.jobs.every((k) => jobs.verified.includes(k)),
    30_000,
    'every change verified at its receiver',
  );
  const [exit] = await stopGracefully([proc], 5000);
  expect(exit!.code).toBe(0);
  expect(catalog.rejected).toEqual([]);
  expect(jobs.rejected).toEqual([]);
  expect(new Set(catalog.verified)).toEqual(new Set(want.catalog));
  expect(new Set(jobs.verified)).toEqual(new Set(want.jobs));
  const notices = proc
    .logs()
    .filter((l) => String(l.msg).startsWith('webhook requests are signed as Standard Webhooks'));
  expect(notices.map((l) => l.sink).sort()).toEqual(['catalog', 'jobs']);
  const output = proc.text();
  for (const secret of [plain, whsec]) expect(output).not.toContain(secret);
});
