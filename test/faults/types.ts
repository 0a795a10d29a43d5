// The recorded history of one fault run: what the checker (checker.ts) reads. Every time is wall
// clock in ms with sub-millisecond precision (performance.timeOrigin + performance.now()), the
// same clock the recorder sink (fixtures/recorder-sink.mjs) writes in the feedsync processes.

export type Scenario = 'local' | 'bullmq';

export const FAULT_KINDS = [
  'kill9',
  'freeze',
  'redis-kill',
  'redis-freeze',
  'proxy-cut',
  'proxy-freeze',
  'sink-fail',
  'sink-hang',
  'sink-slow',
  'store-full',
  'store-lock',
  'cursor',
  'replay',
  'feed-dialect',
  'upstream-errors',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** One delivery of one change to one recorded sink, as the recorder sink wrote it. */
export interface Delivery {
  sink: string;
  pid: number;
  key: string;
  subject: string | null;
  /** event id */
  id: number;
  source: string;
  start: number;
  /** Missing: the process died (or the run ended) before the call settled. */
  end?: number;
  ok?: boolean;
  why?: string | null;
  /** `context.fence` the product passed (scope, token), null when none. */
  fence: { scope: string; token: number } | null;
  /** `context.fence.valid()` at the start, null when no fence. */
  valid: boolean | null;
  /** deliverBatch call id, null for deliver(). */
  batch: string | null;
}

export interface ProcessLife {
  /** Slot name (run-a, p1, w2, …). */
  name: string;
  role: 'run' | 'poll' | 'work';
  pid: number;
  start: number;
  /** When it was seen to exit (kill time for kill -9). */
  end?: number;
  how?: 'killed' | 'exited' | 'stopped';
  code?: number | null;
}

/** One injected fault. Instant faults have start === end. */
export interface FaultRecord {
  kind: FaultKind;
  /** What it hit: a slot name, a sink name, a source, "redis", "all", a profile… */
  target: string;
  /** The feedsync processes it acted on directly (frozen, killed, whose connections were cut). */
  pids: number[];
  start: number;
  end: number;
  detail: Record<string, unknown>;
}

export interface CursorSample {
  source: string;
  t: number;
  value: number;
}

/** Who held the lease: local = the store lease (source "*"), bullmq = the source lease. */
export interface LeaseSample {
  source: string;
  t: number;
  owner: string | null;
  token: number | null;
}

/** A `feedsync cursor set|reset` run while the pollers go on. */
export interface CursorCommand {
  source: string;
  args: string[];
  start: number;
  end: number;
  ok: boolean;
  /** From the success line `<source>: cursor <before> → <after>`. */
  before?: number | null;
  after?: number;
  output: string;
}

/** A `feedsync replay --sink S --source SRC --from ID` run while the pollers go on. */
export interface ReplayCommand {
  sink: string;
  source: string;
  /** The events after this id are delivered to the sink again. */
  from: number;
  /** From the success line `… (it was at <before>)`: the sink's position (the source's cursor if it was live). */
  before?: number | null;
  start: number;
  end: number;
  ok: boolean;
  output: string;
}

/** A change the run must deliver: one sandbox event. */
export interface ExpectedEvent {
  source: string;
  service: 'scheduling' | 'workflow';
  key: string;
  id: number;
  subject: string | null;
  event_type: string;
  resource_type: string;
  /** Position in the feed's listing order (scheduling: id order; workflow: timestamp, then id). */
  pos: number;
}

export interface SinkFilterSpec {
  sources?: string[];
  services?: string[];
  event_types?: string[];
  resource_types?: string[];
}

export interface SinkSpec {
  name: string;
  /** Recorded by the recorder sink (intervals); otherwise only its delivered keys are known. */
  recorded: boolean;
  filter: SinkFilterSpec;
}

export interface LeaseLossCount {
  pid: number;
  sink: string;
  /** feedsync_deliveries_after_lease_loss_total as last scraped (or its log lines, whichever is more). */
  count: number;
}

export interface MirrorRow {
  last: number;
  deleted: boolean;
}

export interface History {
  seed: number;
  scenario: Scenario;
  t0: number;
  tEnd: number;
  events: ExpectedEvent[];
  sinks: SinkSpec[];
  deliveries: Delivery[];
  /** Keys found in sinks that are not recorded (jsonl), per sink. */
  delivered: Record<string, string[]>;
  processes: ProcessLife[];
  faults: FaultRecord[];
  cursorSamples: CursorSample[];
  leaseSamples: LeaseSample[];
  cursorCommands: CursorCommand[];
  /** `feedsync replay` commands, accepted or refused. */
  replays: ReplayCommand[];
  afterLeaseLoss: LeaseLossCount[];
  /** Each mirror sink's rows at the end (sqlite and postgres), by sink name, then subject_url. */
  mirrors: Record<string, Record<string, MirrorRow>>;
}
