import v8 from 'node:v8';

/**
 * The young generation's size is fixed when the V8 heap is created, so it cannot be set from
 * inside a running process (v8.setFlagsFromString accepts the flag and ignores it). On Node 24 a
 * semi-space may grow to 64 MB (the new space to 128 MB) while the daemon drains a backlog: peak
 * RSS 234 MB at 100k events where the live heap stays near 40 MB. 8 MB keeps it flat with no
 * measurable loss of throughput (docs/performance.md has the figures).
 */
export const DAEMON_SEMI_SPACE_MB = 8;
// The minimum too: starting at the cap spares ~10 ms of scavenges while the modules load.
const SEMI_SPACE_FLAGS = [
  `--max-semi-space-size=${DAEMON_SEMI_SPACE_MB}`,
  `--min-semi-space-size=${DAEMON_SEMI_SPACE_MB}`,
];

/** The commands that run for hours and allocate per event; the others exit within a second. */
const DAEMON_COMMANDS = new Set(['run', 'poll', 'work', 'demo']);
/** Global options that take a value as the next argument (`--config FILE`). */
const GLOBAL_OPTIONS_WITH_VALUE = new Set(['--config', '--log-level']);

/** The subcommand of a `feedsync` argv (after node and the script), skipping global options. */
export function subcommandOf(args: readonly string[]): string | undefined {
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === '--') return args[i + 1];
    if (GLOBAL_OPTIONS_WITH_VALUE.has(arg)) i++;
    else if (!arg.startsWith('-')) return arg;
  }
  return undefined;
}

/**
 * The node flags a daemon command should be restarted with, or none: none for short commands,
 * and none when the operator chose a young-generation size (node flags or NODE_OPTIONS, where
 * `--max-semi-space-size=0` restores V8's default) — theirs wins.
 */
export function daemonNodeFlags(
  args: readonly string[],
  execArgv: readonly string[],
  nodeOptions: string | undefined,
): string[] {
  const command = subcommandOf(args);
  if (!command || !DAEMON_COMMANDS.has(command)) return [];
  const given = [...execArgv, ...(nodeOptions ?? '').split(/\s+/)];
  if (given.some((a) => /^--(max|min)[-_]semi[-_]space[-_]size/.test(a))) return [];
  return SEMI_SPACE_FLAGS;
}

/**
 * While it drains a backlog the daemon allocates quickly, and most of what survives a young
 * collection is garbage soon after (pages waiting for their commit, batches waiting for an fsync).
 * V8's default lets the old generation grow to several times the live heap before collecting it,
 * so RSS climbs with the length of the drain. Capping the growth factor keeps RSS flat at the cost
 * of more frequent (incremental, mostly concurrent) major collections: no measurable loss of
 * throughput in `npm run bench`. V8 reads this flag at every collection, so setting it at start-up
 * takes effect; an operator's own setting (NODE_OPTIONS or node flags) wins.
 */
const GROWING_PERCENT = 25;

export function boundHeapGrowth(): void {
  const given = [...process.execArgv, ...(process.env.NODE_OPTIONS ?? '').split(/\s+/)];
  if (given.some((a) => /^--heap[-_]growing[-_]percent/.test(a))) return;
  v8.setFlagsFromString(`--heap-growing-percent=${GROWING_PERCENT}`);
}
