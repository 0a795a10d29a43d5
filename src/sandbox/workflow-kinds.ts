// The workflow service's resource types: jobs in work areas, and their assets and tasks, with the
// fields named by the spec's `changes` lists (hyphenated there, snake_case in JSON).
import type { FieldGen, GenCtx, KindDef, LinkGen } from './kind.js';
import { code, instant, phrase, tagList } from './text-pool.js';
import type { Rng } from './prng.js';
import type { World } from './world.js';
import type { Json, Resource } from '../core/resource.js';

const CUD = ['created', 'updated', 'deleted'] as const;
const STATUS = ['pending', 'in_progress', 'blocked', 'done'];

const pick =
  (...values: string[]): FieldGen =>
  (c) =>
    c.rng.pick(values);
const sub =
  (suffix: string): LinkGen =>
  (c) =>
    `${c.selfUrl}/${suffix}`;
const parent: LinkGen = (c) => c.parentUrl;
const workArea: LinkGen = (c) => c.selfUrl.replace(/\/jobs\/\d+$/, '');

export const JOB: KindDef = {
  type: 'job',
  operations: CUD,
  fields: {
    name: (c) => phrase(c.rng, 'Job '),
    due_date: (c) => instant(c.rng, c.nowMs, 30),
    ends_at: (c) => instant(c.rng, c.nowMs, 45),
    licensor_name: (c) => phrase(c.rng),
    tasks_status: pick(...STATUS),
    assets_status: pick(...STATUS),
    title_external_id: (c) => code(c.rng, 'T'),
    tag_list: (c) => tagList(c.rng, ', '),
    status: pick('open', 'in_progress', 'on_hold', 'completed'),
    deadlines: (c) => deadlines(c),
  },
  links: {
    work_area: workArea,
    assets: sub('assets'),
    tasks: sub('tasks'),
    notes: sub('notes'),
    problems: sub('problems'),
  },
  updatable: [
    'name',
    'due_date',
    'ends_at',
    'licensor_name',
    'tasks_status',
    'assets_status',
    'title_external_id',
    'tag_list',
  ],
  // The spec: "The status of a job is not tracked in changes of job_updated."
  silent: { status: pick('open', 'in_progress', 'on_hold', 'completed') },
};

/**
 * A list inside a resource, the case the specs leave open in JSON (`{"entries":[…]}` or a bare
 * array): held in the collection convention, 0–3 items, so empty lists occur too.
 */
function deadlines(c: GenCtx): Json {
  const n = c.rng.int(0, 3);
  const entries: Resource[] = [];
  for (let i = 0; i < n; i++) {
    entries.push({
      resource_type: 'deadline',
      name: c.rng.pick(['delivery', 'qc', 'publish', 'artwork']),
      due_at: instant(c.rng, c.nowMs, 20),
    });
  }
  return { entries };
}

export const ASSET: KindDef = {
  type: 'asset',
  operations: CUD,
  fields: { type_name: pick('video', 'audio', 'subtitle', 'artwork', 'trailer'), status: pick(...STATUS) },
  links: { job: parent },
  updatable: ['type_name', 'status'],
};

export const TASK: KindDef = {
  type: 'task',
  operations: CUD,
  fields: {
    name: (c) => phrase(c.rng, 'Task '),
    status: pick(...STATUS),
    duration: (c) => c.rng.int(60, 28_800),
  },
  links: { job: parent },
  updatable: ['name', 'status', 'duration'],
};

export const WORKFLOW_KINDS: readonly KindDef[] = [JOB, ASSET, TASK];

/** The spec writes workflow `changes` names hyphenated (`type-name`, `due-date`). */
export function workflowChangeName(field: string): string {
  return field.replace(/_/g, '-');
}

export const WORK_AREA_IDS = [3, 7, 12, 20];

export function seedWorkflowStatics(world: World, rng: Rng): void {
  for (const id of WORK_AREA_IDS) {
    const path = `/api/work_areas/${id}`;
    world.statics.set(path, {
      resource_type: 'work_area',
      id,
      name: phrase(rng, 'Area '),
      self_link: world.url(path),
      jobs_link: world.url(`${path}/jobs`),
    });
  }
}

export function workflowRoot(base: string): Resource {
  return { resource_type: 'workflow', events_link: `${base}/api/events` };
}
