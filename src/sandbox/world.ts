// The in-memory state of one simulated service: live subjects by path, reference resources that
// are never the subject of an event (rules, licensors, work areas…), and per-type pools so that the
// generator can pick a random live resource in O(1).
import type { Rng } from './prng.js';
import type { Resource } from '../core/resource.js';

class LivePool {
  private readonly paths: string[] = [];
  private readonly pos = new Map<string, number>();

  get size(): number {
    return this.paths.length;
  }

  add(path: string): void {
    this.pos.set(path, this.paths.length);
    this.paths.push(path);
  }

  remove(path: string): void {
    const i = this.pos.get(path);
    if (i === undefined) return;
    const last = this.paths.pop() as string;
    this.pos.delete(path);
    if (last !== path) {
      this.paths[i] = last;
      this.pos.set(last, i);
    }
  }

  random(rng: Rng, exclude?: string): string | undefined {
    if (this.paths.length === 0) return undefined;
    const path = rng.pick(this.paths);
    if (path !== exclude) return path;
    if (this.paths.length === 1) return undefined;
    const i = ((this.pos.get(path) as number) + 1 + rng.int(0, this.paths.length - 2)) % this.paths.length;
    return this.paths[i];
  }
}

export class World {
  /** Live subjects (resources that events talk about), by path under the service base. */
  readonly subjects = new Map<string, Resource>();
  /** Reference resources served by GET but never created, changed or deleted by events. */
  readonly statics = new Map<string, Resource>();
  private readonly pools = new Map<string, LivePool>();
  private readonly children = new Map<string, Set<string>>();
  private readonly parentOf = new Map<string, string>();
  private readonly typeOfPath = new Map<string, string>();
  private readonly idCounters = new Map<string, number>();

  constructor(readonly base: string) {}

  url(path: string): string {
    return this.base + path;
  }

  /** The next id of a type; ids skip randomly so clients cannot assume contiguity. */
  nextId(type: string, rng: Rng): number {
    const next = (this.idCounters.get(type) ?? rng.int(0, 40)) + rng.int(1, 3);
    this.idCounters.set(type, next);
    return next;
  }

  add(type: string, path: string, resource: Resource, parentPath?: string): void {
    this.subjects.set(path, resource);
    this.typeOfPath.set(path, type);
    this.pool(type).add(path);
    if (parentPath) {
      let set = this.children.get(parentPath);
      if (!set) this.children.set(parentPath, (set = new Set()));
      set.add(path);
      this.parentOf.set(path, parentPath);
    }
  }

  /** Paths of the live children of a resource (a job's assets and tasks). */
  childrenOf(path: string): string[] {
    return [...(this.children.get(path) ?? [])];
  }

  remove(path: string): void {
    const type = this.typeOfPath.get(path);
    if (type === undefined) return;
    this.subjects.delete(path);
    this.typeOfPath.delete(path);
    this.pool(type).remove(path);
    this.children.delete(path);
    const parent = this.parentOf.get(path);
    if (parent !== undefined) {
      this.children.get(parent)?.delete(path);
      this.parentOf.delete(path);
    }
  }

  typeOf(path: string): string | undefined {
    return this.typeOfPath.get(path);
  }

  liveCount(type: string): number {
    return this.pools.get(type)?.size ?? 0;
  }

  randomLive(type: string, rng: Rng, exclude?: string): string | undefined {
    return this.pools.get(type)?.random(rng, exclude);
  }

  /** A random reference resource whose path starts with `prefix` (e.g. `/api/rules/`). */
  randomStatic(prefix: string, rng: Rng, exclude?: string): string | undefined {
    const paths = [...this.statics.keys()].filter((p) => p.startsWith(prefix) && p !== exclude);
    return paths.length === 0 ? undefined : rng.pick(paths);
  }

  private pool(type: string): LivePool {
    let pool = this.pools.get(type);
    if (!pool) this.pools.set(type, (pool = new LivePool()));
    return pool;
  }
}
