// Shared set-up for the sandbox tests: a sandbox per test file, a digest client for it.
import { startSandbox, type Sandbox, type SandboxOptions } from '../../src/sandbox/index.js';
import { DigestTestClient } from './digest-test-client.js';

export interface Harness {
  sb: Sandbox;
  client: DigestTestClient;
  base: { scheduling: string; workflow: string };
}

export async function harness(opts: SandboxOptions = {}): Promise<Harness> {
  const sb = await startSandbox(opts);
  return {
    sb,
    client: new DigestTestClient(sb.username, sb.password),
    base: { scheduling: sb.schedulingBaseUrl, workflow: sb.workflowBaseUrl },
  };
}

export interface FeedEvent {
  resource_type: string;
  id: number;
  event_type: string;
  timestamp: string;
  changes?: string;
  self_link: string;
  subject_link: string;
  subject?: Record<string, unknown>;
  source_link?: string;
  source?: Record<string, unknown>;
}

export async function feedPage(
  h: Harness,
  service: 'scheduling' | 'workflow',
  query = '',
): Promise<FeedEvent[]> {
  const body = await h.client.getJson(`${h.base[service]}/api/events${query ? `?${query}` : ''}`);
  if (body.resource_type !== 'events' || !Array.isArray(body.entries))
    throw new Error('not an events collection');
  return body.entries as FeedEvent[];
}

/**
 * Reads a whole feed by following newer_than, bounded. With a timestamp-ordered feed whose events
 * sit at most `disorder` places from id order, the first 50 - disorder ids of a full page are
 * certainly all delivered, so the cursor moves only that far; duplicates are dropped by id.
 */
export async function drain(h: Harness, service: 'scheduling' | 'workflow', query = '', disorder = 0) {
  const seen = new Map<number, FeedEvent>();
  let cursor = 0;
  for (let i = 0; i < 10_000; i++) {
    const page = await feedPage(h, service, `newer_than=${cursor}${query ? `&${query}` : ''}`);
    for (const e of page) if (!seen.has(e.id)) seen.set(e.id, e);
    if (page.length < 50) return [...seen.values()];
    const ids = page.map((e) => e.id).sort((a, b) => a - b);
    cursor = ids[50 - disorder - 1] as number;
  }
  throw new Error('feed did not end');
}
