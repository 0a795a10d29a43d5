// What differs between the two simulated services, in one place each: resource kinds, where new
// resources live, names in `changes`, feed order, expansion support, the root.
import type { ServiceProfile } from './generator.js';
import type { KindDef } from './kind.js';
import { PLURALS, SCHEDULING_KINDS, SCHEDULING_REL_ALIASES, schedulingPath } from './scheduling-kinds.js';
import { schedulingRoot } from './scheduling-reference.js';
import type { ServiceName } from './types.js';
import { WORK_AREA_IDS, WORKFLOW_KINDS, workflowChangeName, workflowRoot } from './workflow-kinds.js';
import type { Resource } from '../core/resource.js';

export interface ServiceDescription {
  profile: ServiceProfile;
  /** Which `expand` rels the feed honours (the workflow spec shows none). */
  expandable: ReadonlySet<string>;
  /** true: the feed lists by id (scheduling); false: by timestamp (workflow). */
  orderById: boolean;
  isSubjectPath(path: string): boolean;
  root(base: string): Resource;
  relAliases: Record<string, Record<string, string>>;
}

const SUBJECT_COLLECTIONS = new Set(Object.values(PLURALS));

export function describeService(service: ServiceName, disorder: number): ServiceDescription {
  return service === 'scheduling' ? scheduling() : workflow(disorder);
}

function scheduling(): ServiceDescription {
  return {
    profile: {
      service: 'scheduling',
      kinds: SCHEDULING_KINDS,
      place: (kind: KindDef, id: number) => ({ path: schedulingPath(kind.type, id) }),
      changeName: (field) => field,
      sourceOf: (kind, world, rng) => {
        if (kind.type !== 'scheduling') return undefined;
        return world.url(world.randomStatic('/api/rules/', rng) as string);
      },
      disorder: 0,
    },
    expandable: new Set(['subject', 'source']),
    orderById: true,
    isSubjectPath: (path) => {
      const m = /^\/api\/([a-z_]+)\/\d+$/.exec(path);
      return m !== null && SUBJECT_COLLECTIONS.has(m[1] as string);
    },
    root: schedulingRoot,
    relAliases: SCHEDULING_REL_ALIASES,
  };
}

function workflow(disorder: number): ServiceDescription {
  return {
    profile: {
      service: 'workflow',
      kinds: WORKFLOW_KINDS,
      place: (kind, id, world, rng) => {
        if (kind.type === 'job') return { path: `/api/work_areas/${rng.pick(WORK_AREA_IDS)}/jobs/${id}` };
        const job = world.randomLive('job', rng);
        if (job === undefined) return undefined;
        return { path: `${job}/${kind.type}s/${id}`, parentPath: job };
      },
      changeName: workflowChangeName,
      disorder,
    },
    expandable: new Set(),
    orderById: false,
    isSubjectPath: (path) => /^\/api\/work_areas\/\d+\/jobs\/\d+(\/(assets|tasks)\/\d+)?$/.test(path),
    root: workflowRoot,
    relAliases: {},
  };
}
