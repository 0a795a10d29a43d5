// `feedsync replay --sink NAME [--source S] --from ID|earliest`: re-deliver one sink from a point of
// a source's feed, the other sinks untouched. It only puts the sink at that position (fenced like
// every writer: sink-positions.ts); the source's poller then reads the feed for it on its own
// reader and rejoins it to the shared stream once it has caught up.
import type { FeedsyncConfig, SinkConfig, SourceConfig } from '../config/types.js';
import { ConfigError } from '../core/errors.js';
import { wantsSource } from '../sinks/filter.js';
import { openOps, type OpsHandles } from './admin.js';

export interface ReplayArgs {
  sink: string;
  source?: string;
  /** An event id (the events after it are delivered again) or `earliest`. */
  from: string;
}

/** A replay checked against the config: the sink, the sources it receives, the event id. */
export interface ReplayPlan {
  sink: SinkConfig;
  sources: SourceConfig[];
  from: number;
}

/** One replay started (the admin API's answer, one per source). */
export interface ReplayStarted {
  sink: string;
  source: string;
  from: number;
  /** Where the sink was in the source's feed, or null. */
  before: number | null;
}

export async function replayCommand(
  config: FeedsyncConfig,
  args: ReplayArgs,
  out: (s: string) => void,
): Promise<void> {
  const plan = planReplay(config, args);
  const ops = await openOps(config);
  try {
    await startReplay(ops, plan, (r) =>
      out(
        `${r.sink} from ${r.source}: replaying after event ${r.from} (it was at ${r.before ?? '(none)'}); ` +
          `the poller of ${r.source} re-delivers it; watch it with feedsync status`,
      ),
    );
  } finally {
    await ops.close();
  }
}

/** Checks a replay against the config (ConfigError naming what is wrong) before anything is opened. */
export function planReplay(config: FeedsyncConfig, args: ReplayArgs): ReplayPlan {
  const sink = config.sinks.find((s) => s.name === args.sink);
  if (!sink)
    throw new ConfigError(
      '',
      `unknown sink "${args.sink}" (configured: ${config.sinks.map((s) => s.name).join(', ')})`,
    );
  if (args.from !== 'earliest' && !/^\d+$/.test(args.from))
    throw new ConfigError('', `--from needs a non-negative integer event id or earliest, got "${args.from}"`);
  const from = args.from === 'earliest' ? 0 : Number(args.from);
  if (args.source !== undefined && !config.sources.some((s) => s.name === args.source))
    throw new ConfigError(
      '',
      `unknown source "${args.source}" (configured: ${config.sources.map((s) => s.name).join(', ')})`,
    );
  const sources = config.sources.filter(
    (s) =>
      (args.source === undefined || s.name === args.source) && wantsSource(sink.filter, s.name, s.service),
  );
  if (sources.length === 0)
    throw new ConfigError(
      '',
      `sink "${sink.name}" receives nothing from ${args.source ?? 'any source'} (see its filter)`,
    );
  return { sink, sources, from };
}

/** Puts the sink at the plan's position in each source, one after the other; ReplayRefused stops it. */
export async function startReplay(
  ops: Pick<OpsHandles, 'positions'>,
  plan: ReplayPlan,
  started: (r: ReplayStarted) => void = () => undefined,
): Promise<ReplayStarted[]> {
  const done: ReplayStarted[] = [];
  for (const source of plan.sources) {
    const { before } = await ops.positions.replay({
      source: source.name,
      sink: plan.sink.name,
      from: { cursor: plan.from, seenAbove: [] },
    });
    const r = { sink: plan.sink.name, source: source.name, from: plan.from, before };
    done.push(r);
    started(r);
  }
  return done;
}
