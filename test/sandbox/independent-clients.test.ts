// The sandbox read by clients other people wrote: curl --digest and Python's requests with
// HTTPDigestAuth. Both speak only MD5 Digest, so this proves the default dialect serves the tools
// users already have (root, one feed page in each format and one subject, on both services).
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox, type ServiceName } from '../../src/sandbox/index.js';

const run = promisify(execFile);
const READ_PY = join(import.meta.dirname, 'clients/read.py');
const SERVICES: ServiceName[] = ['scheduling', 'workflow'];
const FORMATS = [
  ['json', 'application/json'],
  ['xml', 'application/xml'],
] as const;

interface Summary {
  status?: number;
  content_encoding?: string | null;
  format: 'json' | 'xml';
  type: string;
  id?: number;
  ids?: number[];
  links: string[];
}

let sb: Sandbox;
beforeAll(async () => {
  sb = await startSandbox({ seed: 11, backlog: 120 });
});
afterAll(() => sb.close());

const base = (service: ServiceName) => (service === 'scheduling' ? sb.schedulingBaseUrl : sb.workflowBaseUrl);

/** The page `?newer_than=0` must list: the first 50 ids (scheduling) or the oldest 50 by timestamp. */
function firstPageIds(service: ServiceName): number[] {
  const events = sb.events(service);
  if (service === 'workflow') {
    events.sort((a, b) => Date.parse(a.occurred_at) - Date.parse(b.occurred_at) || a.id - b.id);
  }
  return events.slice(0, 50).map((e) => e.id);
}

/** A live subject and its id and XML element name. */
function someSubject(service: ServiceName): { url: string; id: number; type: string } {
  const [url, res] = Object.entries(sb.liveState(service)).find(([, r]) => typeof r.id === 'number')!;
  return { url, id: res.id as number, type: res.resource_type };
}

async function curl(
  url: string,
  accept: string,
  extra: string[] = [],
): Promise<{ status: number; body: Buffer }> {
  const { stdout } = await run(
    'curl',
    [
      '--silent',
      '--show-error',
      '--digest',
      '--user',
      `${sb.username}:${sb.password}`,
      '--header',
      `Accept: ${accept}`,
      '--write-out',
      '\n%{http_code}',
      '--max-time',
      '10',
      ...extra,
      url,
    ],
    { encoding: 'buffer', timeout: 15_000 },
  );
  const cut = stdout.lastIndexOf(0x0a);
  return { status: Number(stdout.subarray(cut + 1).toString()), body: stdout.subarray(0, cut) };
}

async function parseWithPython(format: 'json' | 'xml', body: Buffer): Promise<Summary> {
  const child = execFile('python3', [READ_PY, 'parse', format], { timeout: 15_000 });
  const out = new Promise<string>((resolve, reject) => {
    let text = '';
    child.stdout!.on('data', (d: Buffer) => (text += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(text) : reject(new Error(`python exited ${code}`))));
  });
  child.stdin!.end(body);
  return JSON.parse(await out) as Summary;
}

async function requests(url: string, accept: string): Promise<Summary> {
  const { stdout } = await run('python3', [READ_PY, 'fetch', url, sb.username, sb.password, accept], {
    timeout: 20_000,
  });
  return JSON.parse(stdout) as Summary;
}

/** The roots' resource types (XML element names): the scheduling spec calls its root a catalog. */
const ROOT_TYPES: Record<ServiceName, string> = { scheduling: 'catalog', workflow: 'workflow' };

function expectRoot(s: Summary, service: ServiceName): void {
  expect(s.type).toBe(ROOT_TYPES[service]);
  expect(s.links).toContain('events');
}

function expectFirstPage(s: Summary, service: ServiceName): void {
  expect(s.type).toBe('events');
  expect(s.ids).toEqual(firstPageIds(service));
}

function expectSubject(s: Summary, subject: { id: number; type: string }, format: 'json' | 'xml'): void {
  expect(s.type).toBe(format === 'json' ? subject.type : subject.type.replace(/_/g, '-'));
  expect(s.id).toBe(subject.id);
  expect(s.links).toContain('self');
}

describe.each(SERVICES)(
  'independent clients read the %s service (default dialect, MD5 Digest)',
  (service) => {
    it.each(FORMATS)('curl --digest: root, a feed page and a subject as %s', async (format, accept) => {
      const subject = someSubject(service);
      const root = await curl(`${base(service)}/api`, accept);
      expect(root.status).toBe(200);
      expectRoot(await parseWithPython(format, root.body), service);
      const page = await curl(`${base(service)}/api/events?newer_than=0`, accept);
      expect(page.status).toBe(200);
      expectFirstPage(await parseWithPython(format, page.body), service);
      const one = await curl(subject.url, accept);
      expect(one.status).toBe(200);
      expectSubject(await parseWithPython(format, one.body), subject, format);
    });

    it('curl --digest --compressed: a feed page gzip-, deflate- or br-encoded, decoded by curl', async () => {
      const page = await curl(`${base(service)}/api/events?newer_than=0`, 'application/json', [
        '--compressed',
      ]);
      expect(page.status).toBe(200);
      expectFirstPage(await parseWithPython('json', page.body), service);
    });

    it.each(FORMATS)(
      'python requests + HTTPDigestAuth: root, a feed page and a subject as %s',
      async (format, accept) => {
        const subject = someSubject(service);
        const root = await requests(`${base(service)}/api`, accept);
        expect(root.status).toBe(200);
        expectRoot(root, service);
        const page = await requests(`${base(service)}/api/events?newer_than=0`, accept);
        expect(page.status).toBe(200);
        expectFirstPage(page, service);
        // requests asks for gzip/deflate: the sandbox compresses, requests decodes.
        expect(page.content_encoding).toMatch(/^(gzip|deflate|br)$/);
        const one = await requests(subject.url, accept);
        expect(one.status).toBe(200);
        expectSubject(one, subject, format);
      },
    );
  },
);
