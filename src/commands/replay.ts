// `feedsync replay --sink NAME [--source S] --from ID|earliest`: re-deliver one sink from a point of
// a source's feed, the other sinks untouched. It only puts the sink at that position (fenced like
// every writer: sink-positions.ts); the source's poller then reads the feed for it on its own
// reader and rejoins it to the shared stream once it has caught up.
import type { FeedsyncConfig } from '../config/types.js';
import { ConfigError } from '../core/errors.js';
import { wantsSource } from '../sinks/filter.js';
import { openOps } from './admin.js';

export async function replayCommand(
  config: FeedsyncConfig,
  args: { sink: string; source?: string; from: string },
  out: (s: string) => void,
): Promise<void> {
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
  const ops = await openOps(config);
  try {
    for (const source of sources) {
      const { before } = await ops.positions.replay({
        source: source.name,
        sink: sink.name,
        from: { cursor: from, seenAbove: [] },
      });
      out(
        `${sink.name} from ${source.name}: replaying after event ${from} (it was at ${before ?? '(none)'}); ` +
          `the poller of ${source.name} re-delivers it; watch it with feedsync status`,
      );
    }
  } finally {
    await ops.close();
  }
}
