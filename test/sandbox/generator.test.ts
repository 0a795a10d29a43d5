import { afterAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { DigestTestClient } from './digest-test-client.js';

const SCHEDULING_TABLE: [string[], string[]][] = [
  [
    [
      'asset',
      'audio_track',
      'brand',
      'contributor',
      'deal',
      'image',
      'rendition',
      'right',
      'scheduling',
      'subtitle',
      'title',
      'title_group',
    ],
    ['created', 'updated', 'deleted', 'metadata_updated'],
  ],
  [
    ['availability_window', 'credit', 'granted_requirement', 'platform', 'specific_platform'],
    ['created', 'updated', 'deleted'],
  ],
  [
    ['external_id', 'external_id_type', 'linear_program', 'linear_program_group', 'target_platform'],
    ['created', 'updated', 'deleted'],
  ],
  [['publication'], ['created']],
];
const SCHEDULING_TYPES = SCHEDULING_TABLE.flatMap(([resources, ops]) =>
  resources.flatMap((r) => ops.map((o) => `${r}_${o}`)),
);
const WORKFLOW_TYPES = ['asset', 'job', 'task'].flatMap((r) =>
  ['created', 'updated', 'deleted'].map((o) => `${r}_${o}`),
);
const WORKFLOW_CHANGES: Record<string, string[]> = {
  asset: ['type-name', 'status'],
  job: [
    'name',
    'due-date',
    'ends-at',
    'licensor-name',
    'tasks-status',
    'assets-status',
    'title-external-id',
    'tag-list',
  ],
  task: ['name', 'status', 'duration'],
};

const opened: Sandbox[] = [];
async function open(opts: Parameters<typeof startSandbox>[0]) {
  const sb = await startSandbox(opts);
  opened.push(sb);
  return sb;
}
afterAll(() => Promise.all(opened.map((s) => s.close())));

const strip = (sb: Sandbox, s: string) => s.replace(`http://127.0.0.1:${sb.port}`, '');

describe('sandbox generator', () => {
  it('is deterministic per seed and differs between seeds', async () => {
    const [a, b, c] = await Promise.all([
      open({ seed: 42, backlog: 300 }),
      open({ seed: 42, backlog: 300 }),
      open({ seed: 43, backlog: 300 }),
    ]);
    for (const service of ['scheduling', 'workflow'] as const) {
      const view = (sb: Sandbox) => JSON.stringify(sb.events(service)).replaceAll(`:${sb.port}/`, ':PORT/');
      const live = (sb: Sandbox) =>
        JSON.stringify(sb.liveState(service)).replaceAll(`:${sb.port}/`, ':PORT/');
      expect(view(a)).toBe(view(b));
      expect(live(a)).toBe(live(b));
      expect(view(a)).not.toBe(view(c));
    }
    expect(a.events('scheduling').map((e) => strip(a, e.subject_url))).toEqual(
      b.events('scheduling').map((e) => strip(b, e.subject_url)),
    );
  });

  it('covers every event type of both specs, and nothing else, in a large backlog', async () => {
    const sb = await open({ seed: 1, backlog: 4000 });
    const seen = new Set(sb.events('scheduling').map((e) => e.event_type));
    expect([...SCHEDULING_TYPES].filter((t) => !seen.has(t))).toEqual([]);
    expect([...seen].filter((t) => !SCHEDULING_TYPES.includes(t))).toEqual([]);
    const wf = sb.events('workflow');
    expect(new Set(wf.map((e) => e.event_type))).toEqual(new Set(WORKFLOW_TYPES));
    for (const e of wf.filter((x) => x.operation === 'updated')) {
      expect(e.changes.length).toBeGreaterThan(0);
      for (const name of e.changes) expect(WORKFLOW_CHANGES[e.resource_type]).toContain(name);
    }
    for (const e of sb.events('scheduling')) {
      expect(e.changes.length > 0).toBe(e.operation === 'updated');
      expect(e.source_url !== null).toBe(e.event_type === 'scheduling_created');
    }
  });

  it('handles 100k+ events per service with fast feed queries', async () => {
    const started = Date.now();
    const sb = await open({ seed: 9, backlog: 100_000 });
    const built = Date.now() - started;
    expect(sb.events('workflow')).toHaveLength(100_000);
    const client = new DigestTestClient(sb.username, sb.password);
    const mid = sb.events('workflow')[50_000]!.id;
    await client.getJson(`${sb.workflowBaseUrl}/api/events?newer_than=${mid}`);
    const t0 = performance.now();
    for (let i = 0; i < 20; i++) {
      await client.getJson(
        `${sb.workflowBaseUrl}/api/events?newer_than=${mid + i}&event_type=task_deleted,job_created`,
      );
      await client.getJson(`${sb.schedulingBaseUrl}/api/events?newer_than=${mid + i}`);
    }
    const perRequest = (performance.now() - t0) / 40;
    expect(perRequest).toBeLessThan(50);
    expect(built).toBeLessThan(20_000);
  });
});
