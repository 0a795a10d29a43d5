// One simulated service: its world, event log and generator, and the representations its endpoints
// return (root, feed page, one event, one subject), as resources in the specs' JSON conventions.
import { EventGenerator } from './generator.js';
import { EventLog } from './event-log.js';
import { Rng } from './prng.js';
import { describeService, type ServiceDescription } from './profiles.js';
import { EMBED_EXTERNAL_ID_TYPES } from './scheduling-kinds.js';
import { seedSchedulingStatics } from './scheduling-reference.js';
import type { RequestKind, SandboxEvent, ServiceName } from './types.js';
import { seedWorkflowStatics } from './workflow-kinds.js';
import { World } from './world.js';
import type { XmlWriteOptions } from './xml-writer.js';
import type { Collection, Resource } from '../core/resource.js';

export interface ServiceSimOptions {
  seed: number;
  disorder: number;
  backlogStartMs: number;
}

/** A feed request that cannot be answered; `param` names the culprit query parameter. */
export class FeedParamError extends Error {
  constructor(
    readonly param: string,
    message: string,
  ) {
    super(message);
  }
}

const OPERATION_SUFFIXES = ['_metadata_updated', '_created', '_updated', '_deleted'];

export class ServiceSim {
  readonly world: World;
  readonly log: EventLog;
  readonly description: ServiceDescription;
  readonly xmlOptions: XmlWriteOptions;
  private readonly generator: EventGenerator;

  constructor(
    readonly service: ServiceName,
    readonly base: string,
    opts: ServiceSimOptions,
  ) {
    const rng = new Rng(opts.seed);
    this.description = describeService(service, opts.disorder);
    this.world = new World(base);
    this.log = new EventLog(this.description.orderById ? 'id' : 'timestamp', opts.disorder);
    if (service === 'scheduling') seedSchedulingStatics(this.world, rng, opts.backlogStartMs);
    else seedWorkflowStatics(this.world, rng);
    this.generator = new EventGenerator(
      this.description.profile,
      this.world,
      this.log,
      rng,
      opts.backlogStartMs,
    );
    this.xmlOptions = {
      relAliases: this.description.relAliases,
      embeddedType: (parent, rel) => (rel === 'subject' ? subjectTypeOf(parent) : undefined),
    };
  }

  backlog(count: number): void {
    this.generator.backlog(count);
  }

  generateNow(count: number): void {
    this.generator.now(count);
  }

  classify(path: string): RequestKind {
    if (path === '/api' || path === '/api/') return 'root';
    if (path === '/api/events') return 'feed';
    if (/^\/api\/events\/[^/]+$/.test(path)) return 'event';
    if (this.description.isSubjectPath(path)) return 'subject';
    return 'other';
  }

  root(): Resource {
    return this.description.root(this.base);
  }

  /** One feed page for the query parameters of GET /api/events. */
  feed(params: URLSearchParams): Collection {
    const newerThanText = params.get('newer_than');
    let newerThan: number | undefined;
    if (newerThanText !== null) {
      if (!/^-?\d+$/.test(newerThanText.trim())) {
        throw new FeedParamError(
          'newer_than',
          `newer_than must be an integer event id, got "${newerThanText}"`,
        );
      }
      newerThan = Number(newerThanText.trim());
    }
    const types = (params.get('event_type') ?? '')
      .split(',')
      .map((t) => t.trim())
      .filter((t) => t !== '');
    const page = this.log.query({
      ...(newerThan !== undefined ? { newerThan } : {}),
      ...(types.length > 0 ? { types } : {}),
    });
    const expand = this.expandSet(params);
    return { resource_type: 'events', entries: page.map((ev) => this.eventResource(ev, expand)) };
  }

  /** GET /api/events/{id}; undefined when there is no such event. */
  event(idText: string, params: URLSearchParams): Resource | undefined {
    if (!/^\d+$/.test(idText)) return undefined;
    const ev = this.log.get(Number(idText));
    return ev && this.eventResource(ev, this.expandSet(params));
  }

  /** A live subject or a reference resource; undefined once deleted (or never existing). */
  resource(path: string): Resource | undefined {
    return this.world.subjects.get(path) ?? this.world.statics.get(path);
  }

  events(): SandboxEvent[] {
    return this.log.list();
  }

  liveState(): Record<string, Resource> {
    const out: Record<string, Resource> = {};
    for (const [path, res] of this.world.subjects) out[this.world.url(path)] = structuredClone(res);
    return out;
  }

  private expandSet(params: URLSearchParams): Set<string> {
    const wanted = (params.get('expand') ?? '').split(',').map((r) => r.trim());
    return new Set(wanted.filter((r) => this.description.expandable.has(r)));
  }

  private eventResource(ev: SandboxEvent, expand: Set<string>): Resource {
    const r: Resource = {
      resource_type: 'event',
      id: ev.id,
      event_type: ev.event_type,
      timestamp: ev.timestamp,
    };
    // Some upstreams put a space after the commas; clients trim (docs/change-v1.md, `changes`).
    if (ev.operation === 'updated') r.changes = ev.changes.join(ev.id % 7 === 0 ? ', ' : ',');
    r.self_link = ev.event_url;
    r.subject_link = ev.subject_url;
    if (expand.has('subject')) {
      const subject = this.world.subjects.get(ev.subject_url.slice(this.base.length));
      if (subject) r.subject = embedSubject(subject);
    }
    if (ev.source_url !== null) {
      r.source_link = ev.source_url;
      const rule = expand.has('source')
        ? this.world.statics.get(ev.source_url.slice(this.base.length))
        : undefined;
      if (rule) r.source = structuredClone(rule);
    }
    return r;
  }
}

/** The feed embeds a subject under the generic label `subject`, external_id only where the spec says. */
function embedSubject(res: Resource): Resource {
  const { resource_type: type, ...fields } = structuredClone(res);
  if (!EMBED_EXTERNAL_ID_TYPES.has(type)) delete fields.external_id;
  return { resource_type: 'subject', ...fields };
}

function subjectTypeOf(event: Resource): string | undefined {
  const type = event.event_type;
  if (typeof type !== 'string') return undefined;
  const suffix = OPERATION_SUFFIXES.find((s) => type.endsWith(s));
  return suffix ? type.slice(0, -suffix.length) : undefined;
}
