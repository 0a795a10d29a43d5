// What a fault module (nemesis/*.ts) can act on during a run, and how a fault is planned from the
// seed. The runner (runner.ts) builds the World; the schedule (schedule.ts) calls plan().
import type { Rng } from '../../src/sandbox/prng.js';
import type { Sandbox } from '../../src/sandbox/index.js';
import type { FaultProxy } from './proxy.js';
import type { RedisProc } from './redis-proc.js';
import type { Sampler } from './recorder.js';
import type { Supervisor } from './supervisor.js';
import type { CursorCommand, FaultKind, FaultRecord, ReplayCommand, Scenario } from './types.js';

export interface Timing {
  /** queue.lease_ttl_ms (bullmq source leases). */
  leaseTtlMs: number;
  /** The local store lease's TTL (STORE_LEASE_TTL_MS unless FAULT_LOCAL_LEASE_MS says otherwise). */
  localLeaseMs: number;
  /** BullMQ lock of an active slice + the stalled check interval: how long a frozen worker keeps its job. */
  workerLockMs: number;
}

export interface PlanContext {
  scenario: Scenario;
  timing: Timing;
  /** No single fault may last longer than this (the short runs keep it low). */
  maxFaultMs: number;
  /** A tmpfs can be mounted for the store (store-full). */
  canMount: boolean;
}

export type Params = Record<string, string | number | boolean>;

export interface Step {
  /** Nominal start, ms after the fault phase began (a step also waits for the foreground one before it). */
  at: number;
  kind: FaultKind;
  target: string;
  params: Params;
}

export interface SinkBehaviour {
  mode: 'fail' | 'hang' | 'slow';
  until: number;
  ms?: number;
}

export interface World {
  scenario: Scenario;
  timing: Timing;
  now(): number;
  sleep(ms: number): Promise<void>;
  sandbox: Sandbox;
  sup: Supervisor;
  sampler: Sampler;
  /** bullmq only. */
  redis?: RedisProc;
  /** bullmq only: each process slot reaches Redis through its own proxy. */
  proxies: Map<string, FaultProxy>;
  /** local only. */
  store?: { path: string; mountDir?: string };
  /** The slots that poll (local: the `run` processes; bullmq: the `poll` ones). */
  pollers: string[];
  setSink(name: string, b: SinkBehaviour | undefined): void;
  /** Runs `feedsync cursor …` with the ops config and records it. */
  cursorCommand(args: string[]): Promise<CursorCommand>;
  /** Runs `feedsync replay --sink S --source SRC --from ID` with the ops config and records it. */
  replayCommand(sink: string, source: string, from: number): Promise<ReplayCommand>;
  record(f: FaultRecord): void;
  /** Local: lets a dead process's store lease expire now, as if its TTL had passed. */
  expireLeaseOf(pid: number): void;
  /** The slot holding the store lease (local) or the source lease (bullmq), if a live one does. */
  holderSlot(source?: string): string | undefined;
  log(line: string): void;
  /** Background faults register their heal here (run at the end of the fault phase). */
  onHeal(fn: () => void | Promise<void>): void;
}

export interface Nemesis {
  kind: FaultKind;
  scenarios: Scenario[];
  /** Relative frequency in random schedules. */
  weight: number;
  /** Returns immediately (the fault runs on by itself until healed), e.g. a sink failing for a while. */
  background?: boolean;
  /** Whether this fault can run in the context at all (e.g. store-full needs a tmpfs). */
  available?(ctx: PlanContext): boolean;
  plan(rng: Rng, ctx: PlanContext): { target: string; params: Params };
  run(world: World, step: Step): Promise<void>;
}
