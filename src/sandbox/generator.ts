// Produces a service's events: picks a resource type and an operation, really applies it to the
// world (so a GET afterwards shows it), and appends the events to the log. Deterministic for a seed:
// every choice comes from the service's own PRNG stream.
import { applyUpdate, buildResource, touch, type GenCtx, type KindDef, type Operation } from './kind.js';
import type { EventLog } from './event-log.js';
import type { Rng } from './prng.js';
import type { SandboxEvent, ServiceName } from './types.js';
import type { World } from './world.js';
import { formatWithOffset } from './datetime-style.js';

/** Where a new resource of a kind lives; undefined when its parent does not exist yet. */
export interface Placement {
  path: string;
  parentPath?: string;
}

export interface ServiceProfile {
  service: ServiceName;
  kinds: readonly KindDef[];
  place(kind: KindDef, id: number, world: World, rng: Rng): Placement | undefined;
  /** The name an attribute or rel has in an event's `changes`. */
  changeName(field: string): string;
  /** The rule a created resource came from (scheduling_created's `source`), if any. */
  sourceOf?(kind: KindDef, world: World, rng: Rng): string | undefined;
  /** Max places an event is listed away from its id order (0: timestamps follow ids). */
  disorder: number;
}

const OFFSETS = [120, -300, 330, 60];
/** An operation no spec table lists: `<type>_archived` changes nothing on the subject. */
const UNLISTED_OPERATION = 'archived';

export class EventGenerator {
  private nextEventId: number;
  private backlogCursorMs: number;

  constructor(
    private readonly profile: ServiceProfile,
    private readonly world: World,
    private readonly log: EventLog,
    private readonly rng: Rng,
    backlogStartMs: number,
    firstEventId = 1000,
    /** Whether some events get a type the specs' tables do not list (`job_archived`); read per event. */
    private readonly unknownTypes: () => boolean = () => false,
  ) {
    this.nextEventId = firstEventId + rng.int(0, 9000);
    this.backlogCursorMs = backlogStartMs;
  }

  /** Past events on a synthetic timeline (whole seconds, 1–30 s apart): the same for a seed. */
  backlog(count: number): void {
    const times: number[] = [];
    for (let i = 0; i < count; i++) {
      this.backlogCursorMs += this.rng.int(1, 30) * 1000;
      times.push(this.backlogCursorMs);
    }
    this.emit(times);
  }

  /** Events happening now: timestamps end at the current time (never before earlier events). */
  now(count: number, nowMs = Date.now()): void {
    const first = Math.max(this.log.lastTimestampMs + 1, nowMs - (count - 1));
    this.emit(Array.from({ length: count }, (_, i) => first + i));
  }

  private emit(times: number[]): void {
    if (times.length === 0) return;
    this.disorder(times);
    const batch: SandboxEvent[] = [];
    while (batch.length < times.length) {
      for (const ev of this.next(times, batch.length)) batch.push(ev);
    }
    this.log.append(batch);
  }

  /**
   * Permutes timestamps inside consecutive blocks of at most disorder+1 events, so that in timestamp
   * order every event is at most `disorder` places from its id order (the bound the feed relies on).
   */
  private disorder(times: number[]): void {
    const d = this.profile.disorder;
    if (d === 0) return;
    for (let start = 0; start < times.length;) {
      const size = Math.min(this.rng.int(1, d + 1), times.length - start);
      const block = this.rng.shuffle(times.slice(start, start + size));
      times.splice(start, size, ...block);
      start += size;
    }
  }

  /** One logical change at times[at]: one event, or a job deletion with its children's deletions first. */
  private next(times: number[], at: number): SandboxEvent[] {
    const kind = this.rng.pick(this.profile.kinds);
    const ms = times[at] as number;
    // Only drawn when on, so that a seed gives the same history as before with it off.
    if (this.unknownTypes() && this.world.liveCount(kind.type) > 0 && this.rng.chance(0.08)) {
      const path = this.world.randomLive(kind.type, this.rng) as string;
      return [this.event(kind.type, UNLISTED_OPERATION, path, ms, [])];
    }
    const op = this.pickOperation(kind);
    if (op === 'created' || this.world.liveCount(kind.type) === 0) return this.create(kind, ms);
    const path = this.world.randomLive(kind.type, this.rng) as string;
    if (op === 'deleted') {
      const children = this.world.childrenOf(path);
      if (at + children.length < times.length) {
        const evs = children.map((child, i) => this.remove(child, times[at + i] as number));
        return [...evs, this.remove(path, times[at + children.length] as number)];
      }
    }
    const res = this.world.subjects.get(path)!;
    const ctx = this.ctx(res.self_link as string, ms, res.job_link as string | undefined);
    if (op === 'metadata_updated') {
      touch(kind, res, ctx);
      return [this.event(kind.type, op, path, ms, [])];
    }
    const changed = applyUpdate(kind, res, ctx);
    if (changed.length === 0) return this.create(kind, ms);
    return [
      this.event(
        kind.type,
        'updated',
        path,
        ms,
        changed.map((f) => this.profile.changeName(f)),
      ),
    ];
  }

  private pickOperation(kind: KindDef): Operation {
    const ops = kind.operations;
    const r = this.rng.next();
    const want: Operation =
      r < 0.35 ? 'created' : r < 0.75 ? 'updated' : r < 0.87 ? 'deleted' : 'metadata_updated';
    if (ops.includes(want)) return want;
    return ops.includes('updated') && want === 'metadata_updated' ? 'updated' : (ops[0] as Operation);
  }

  private create(kind: KindDef, ms: number): SandboxEvent[] {
    const id = this.world.nextId(kind.type, this.rng);
    const placement = this.profile.place(kind, id, this.world, this.rng);
    if (!placement) {
      // The kind needs a parent that does not exist yet: create a parent first instead.
      return this.create(this.profile.kinds[0] as KindDef, ms);
    }
    const parentUrl = placement.parentPath ? this.world.url(placement.parentPath) : undefined;
    const res = buildResource(kind, id, this.ctx(this.world.url(placement.path), ms, parentUrl));
    this.world.add(kind.type, placement.path, res, placement.parentPath);
    const source = this.profile.sourceOf?.(kind, this.world, this.rng) ?? null;
    return [this.event(kind.type, 'created', placement.path, ms, [], source)];
  }

  private remove(path: string, ms: number): SandboxEvent {
    const type = this.world.typeOf(path) as string;
    this.world.remove(path);
    return this.event(type, 'deleted', path, ms, []);
  }

  private event(
    type: string,
    operation: Operation | typeof UNLISTED_OPERATION,
    path: string,
    ms: number,
    changes: string[],
    sourceUrl: string | null = null,
  ): SandboxEvent {
    this.nextEventId += this.rng.int(1, 3);
    const id = this.nextEventId;
    const offset = this.rng.chance(0.25) ? this.rng.pick(OFFSETS) : 0;
    return {
      id,
      service: this.profile.service,
      event_type: `${type}_${operation}`,
      resource_type: type,
      operation,
      timestamp: formatWithOffset(ms, offset),
      occurred_at: new Date(ms).toISOString(),
      changes,
      event_url: this.world.url(`/api/events/${id}`),
      subject_url: this.world.url(path),
      source_url: sourceUrl,
    };
  }

  private ctx(selfUrl: string, nowMs: number, parentUrl?: string): GenCtx {
    return { rng: this.rng, world: this.world, selfUrl, nowMs, ...(parentUrl ? { parentUrl } : {}) };
  }
}
