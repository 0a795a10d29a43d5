// How a resource type of a simulated service is described (fields, links, what an update may change)
// and the two generic operations on it: build a new resource and apply an update.
import type { Rng } from './prng.js';
import type { World } from './world.js';
import type { Json, Resource } from '../core/resource.js';

export interface GenCtx {
  rng: Rng;
  world: World;
  /** Absolute URL of the resource being built or changed. */
  selfUrl: string;
  /** The event's instant, as epoch milliseconds. */
  nowMs: number;
  /** The parent resource's URL, for kinds that live under a parent (workflow assets and tasks). */
  parentUrl?: string;
}

export type FieldGen = (c: GenCtx) => Json;
/** A link's target URL; undefined when there is nothing to point to. */
export type LinkGen = (c: GenCtx) => string | undefined;

export type Operation = 'created' | 'updated' | 'deleted' | 'metadata_updated';

export interface KindDef {
  type: string;
  operations: readonly Operation[];
  /** False for resources the spec shows without an id (target_platform). */
  hasId?: boolean;
  /** Carries created_at/updated_at (scheduling resources). */
  timestamps?: boolean;
  fields: Record<string, FieldGen>;
  links: Record<string, LinkGen>;
  /** Attribute names and link rels an update may change (JSON names). */
  updatable: readonly string[];
  /** Attributes an update may change without listing them in `changes` (a job's status). */
  silent?: Record<string, FieldGen>;
}

export function buildResource(kind: KindDef, id: number, c: GenCtx): Resource {
  const res: Resource = { resource_type: kind.type };
  if (kind.hasId !== false) res.id = id;
  for (const [name, gen] of Object.entries(kind.fields)) res[name] = gen(c);
  if (kind.timestamps) {
    res.created_at = new Date(c.nowMs).toISOString();
    res.updated_at = res.created_at;
  }
  res.self_link = c.selfUrl;
  for (const [rel, gen] of Object.entries(kind.links)) {
    const href = gen(c);
    if (href !== undefined) res[`${rel}_link`] = href;
  }
  return res;
}

/**
 * Changes 1–3 of the kind's updatable names in place; returns the names that really changed (a new
 * value differs from the old one), possibly none when no link target can differ.
 */
export function applyUpdate(kind: KindDef, res: Resource, c: GenCtx): string[] {
  const wanted = c.rng.sample(kind.updatable, c.rng.int(1, Math.min(3, kind.updatable.length)));
  const changed: string[] = [];
  for (const name of wanted) {
    if (name in kind.fields) {
      const gen = kind.fields[name] as FieldGen;
      const before = JSON.stringify(res[name]);
      for (let attempt = 0; attempt < 5 && JSON.stringify(res[name]) === before; attempt++)
        res[name] = gen(c);
      if (JSON.stringify(res[name]) !== before) changed.push(name);
    } else {
      const gen = kind.links[name] as LinkGen;
      const before = res[`${name}_link`];
      const href = gen(c);
      if (href !== undefined && href !== before) {
        res[`${name}_link`] = href;
        changed.push(name);
      }
    }
  }
  for (const [name, gen] of Object.entries(kind.silent ?? {})) {
    if (c.rng.chance(0.3)) res[name] = gen(c);
  }
  if (changed.length > 0 || kind.silent) touch(kind, res, c);
  return changed;
}

/** Moves updated_at to the event's instant (metadata updates change nothing else on the resource). */
export function touch(kind: KindDef, res: Resource, c: GenCtx): void {
  if (kind.timestamps) res.updated_at = new Date(c.nowMs).toISOString();
}
