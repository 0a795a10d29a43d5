// The `feedsync` command line, imported by src/cli.ts. Only commander is loaded up front: each action imports its command
// module when it runs, so `run` never loads the sandbox and `--help` loads neither zod nor undici.
// docs/cli.md describes every command, flag, exit code and JSON shape.
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import type { GlobalOptions } from './commands/context.js';
import { CommandError } from './commands/errors.js';
import { version } from './version.js';

const print = (s: string) => process.stdout.write(`${s}\n`);

/** pino's levels, as `log.level` accepts them. */
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

function int(name: string, min = 0) {
  return (value: string) => {
    const n = Number(value);
    if (!/^-?\d+$/.test(value) || n < min)
      throw new InvalidArgumentError(`${name} must be an integer ≥ ${min}`);
    return n;
  };
}
function seconds(name: string, min: number) {
  return (value: string) => {
    const n = Number(value);
    if (!/^\d+(\.\d+)?$/.test(value) || n < min)
      throw new InvalidArgumentError(`${name} must be a number of seconds ≥ ${min}`);
    return n;
  };
}
function probability(value: string) {
  const n = Number(value);
  if (!(n >= 0 && n <= 1)) throw new InvalidArgumentError('must be a number from 0 to 1');
  return n;
}
/** `--help` ends with worked examples: what an operator would type, one per line. */
function examples(cmd: Command, ...lines: string[]): Command {
  return cmd.addHelpText('after', `\nExamples:\n${lines.map((l) => `  $ ${l}`).join('\n')}\n`);
}

const program = new Command('feedsync')
  .description('Keeps other systems in sync with the scheduling and job-workflow change-event feeds')
  .version(version)
  .option('--config <file>', 'config file (default: $FEEDSYNC_CONFIG, else config/feedsync.yaml)')
  .option('--pretty', 'human-friendly log output (default when stdout is a terminal)')
  .addOption(
    new Option('--log-level <level>', 'log level for this run, overriding log.level of the config').choices(
      LOG_LEVELS,
    ),
  )
  .showHelpAfterError()
  .exitOverride();
examples(
  program,
  'feedsync check-config --config /etc/feedsync/feedsync.yaml',
  'feedsync run --log-level debug',
  'feedsync status --watch',
  'feedsync <command> --help',
);

/** Global options, wherever they were given (before or after the subcommand). */
const globals = (cmd: Command): GlobalOptions => cmd.optsWithGlobals<GlobalOptions>();
/** For commands whose stdout is data: logs never go there. */
const quiet = (cmd: Command): GlobalOptions => ({ ...globals(cmd), pretty: false });

for (const [mode, description, example] of [
  [
    'run',
    'pollers and sink workers in one process (the default deployment)',
    'feedsync run --config config/feedsync.yaml',
  ],
  [
    'poll',
    'pollers only, enqueueing into BullMQ (needs queue.driver: bullmq)',
    'feedsync poll --log-level info',
  ],
  [
    'work',
    'sink workers only, consuming BullMQ; stateless, scale horizontally',
    'feedsync work --log-level warn',
  ],
] as const) {
  examples(
    program
      .command(mode)
      .description(description)
      .action(async (_o: unknown, cmd: Command) => {
        const { daemonCommand } = await import('./commands/daemon-command.js');
        await daemonCommand(mode, globals(cmd));
      }),
    example,
  );
}

examples(
  program
    .command('sandbox')
    .description(
      'serve a simulator of both upstream services on 127.0.0.1 for demos and tests; prints one JSON line ' +
        '{scheduling_base_url, workflow_base_url, username, password, control_url} on stdout when ready',
    )
    .option('--port <n>', 'port (0 = any free port)', int('--port'), 4010)
    .option('--seed <n>', 'seed of the deterministic activity generator', int('--seed'), 1)
    .option('--backlog <n>', 'events generated up front on each service', int('--backlog'), 200)
    .option('--rate <events_per_s>', 'live events per second on each service', Number, 1)
    .option('--fault-rate <p>', 'share of requests answered with an injected fault (0..1)', probability, 0)
    .option(
      '--dialect <name>',
      'the forms the services answer in: a profile (default, strict-spec, rails, digest-modern, ' +
        'digest-legacy, odd-syntax, flaky-keepalive; see docs/sandbox.md)',
      'default',
    )
    .option(
      '--dialect-option <switch=value>',
      'override one switch of the dialect, e.g. xmlQuote=single (repeatable; see docs/sandbox.md)',
      (v: string, all: string[]) => [...all, v],
      [] as string[],
    )
    .option('--digest-algorithms <list>', 'Digest algorithms offered, one challenge each, e.g. SHA-256,MD5')
    .action(
      async (o: {
        port: number;
        seed: number;
        backlog: number;
        rate: number;
        faultRate: number;
        dialect: string;
        dialectOption: string[];
        digestAlgorithms?: string;
      }) => {
        const { sandboxCommand, sandboxDialect } = await import('./commands/sandbox.js');
        await sandboxCommand({
          port: o.port,
          seed: o.seed,
          backlog: o.backlog,
          rate: o.rate,
          faultRate: o.faultRate,
          dialect: sandboxDialect(o.dialect, o.dialectOption, o.digestAlgorithms),
        });
      },
    ),
  'feedsync sandbox --port 4010 --backlog 1000 --rate 5',
  'feedsync sandbox --port 0 --fault-rate 0.1   # any free port; 10 % injected faults',
  'feedsync sandbox --port 0 --dialect strict-spec --dialect-option xmlDeclaration=false',
);

examples(
  program
    .command('demo')
    .description(
      'sandbox + run against it on embedded defaults: no Redis, no credentials; shows changes flowing',
    )
    .option('--backlog <n>', 'events waiting on each service at start', int('--backlog'), 500)
    .option('--rate <events_per_s>', 'live events per second on each service', Number, 5)
    .option('--seed <n>', 'sandbox seed', int('--seed'), 1)
    .option('--duration <s>', 'stop by itself after this many seconds', int('--duration', 1))
    .option('--dir <path>', 'where the store and outputs go (default: a new temp dir)')
    .action(
      async (
        o: { backlog: number; rate: number; seed: number; duration?: number; dir?: string },
        cmd: Command,
      ) => {
        const { demoCommand } = await import('./commands/demo.js');
        await demoCommand({ ...o, logLevel: globals(cmd).logLevel }, print);
      },
    ),
  'feedsync demo',
  'feedsync demo --duration 10 --dir ./demo-out',
);

examples(
  program
    .command('status')
    .description('per source: cursor, last poll, behind or caught up; per sink: queued, failed, dead letters')
    .option('--json', 'machine-readable output (one compact JSON document per refresh with --watch)')
    .option('--watch', 'refresh until Ctrl-C (in place on a terminal, appended otherwise)')
    .option('--interval <s>', 'seconds between refreshes with --watch', seconds('--interval', 0.1), 2)
    .action(async (o: { json?: boolean; watch?: boolean; interval: number }, cmd: Command) => {
      const [{ loadForCommand }, { statusCommand }] = await Promise.all([
        import('./commands/context.js'),
        import('./commands/status.js'),
      ]);
      const { loaded } = loadForCommand(quiet(cmd));
      await statusCommand(
        loaded.config,
        { json: o.json === true, watch: o.watch, intervalS: o.interval },
        print,
      );
    }),
  'feedsync status',
  'feedsync status --json | jq ".sinks[] | {sink, dead}"',
  'feedsync status --watch --interval 5',
);

const cursor = examples(
  program.command('cursor').description('inspect or move a cursor (refuses while a poller holds the source)'),
  'feedsync cursor show',
  'feedsync cursor reset scheduling --to latest',
);
type CursorArgs = Parameters<typeof import('./commands/cursor.js').cursorCommand>;
async function runCursor(cmd: Command, action: CursorArgs[1], args: CursorArgs[2]): Promise<void> {
  const [{ loadForCommand }, { cursorCommand }] = await Promise.all([
    import('./commands/context.js'),
    import('./commands/cursor.js'),
  ]);
  const { loaded } = loadForCommand(quiet(cmd));
  await cursorCommand(loaded.config, action, args, print);
}
examples(
  cursor
    .command('show')
    .description("print each source's saved cursor (the id of the last event it committed)")
    .option('--json', 'machine-readable output')
    .action((o: { json?: boolean }, cmd: Command) => runCursor(cmd, 'show', { json: o.json === true })),
  'feedsync cursor show',
  'feedsync cursor show --json',
);
examples(
  cursor
    .command('set <source> <id>')
    .description('continue SOURCE after event ID (events with a greater id are delivered next)')
    .action((source: string, id: string, _o: unknown, cmd: Command) => runCursor(cmd, 'set', { source, id })),
  'feedsync cursor set scheduling 41230',
);
examples(
  cursor
    .command('reset <source>')
    .description(
      'move the cursor to the feed start (earliest: everything is delivered again) or to its newest event ' +
        '(latest: pages through the feed, showing progress on stderr; Ctrl-C stops without writing)',
    )
    .addOption(
      new Option('--to <where>', 'latest or earliest').choices(['latest', 'earliest']).makeOptionMandatory(),
    )
    .action((source: string, o: { to: string }, cmd: Command) =>
      runCursor(cmd, 'reset', { source, to: o.to }),
    ),
  'feedsync cursor reset workflow --to latest',
  'feedsync cursor reset scheduling --to earliest',
);

examples(
  program
    .command('replay')
    .description(
      're-deliver one sink from a point of the feed on its own reader, the other sinks untouched ' +
        '(refused while another replay of it runs; watch it with feedsync status)',
    )
    .requiredOption('--sink <name>', 'the sink to re-deliver')
    .option('--source <name>', 'only this source (default: every source the sink receives)')
    .requiredOption('--from <id>', 'an event id (the events after it are delivered again) or earliest')
    .action(async (o: { sink: string; source?: string; from: string }, cmd: Command) => {
      const [{ loadForCommand }, { replayCommand }] = await Promise.all([
        import('./commands/context.js'),
        import('./commands/replay.js'),
      ]);
      const { loaded } = loadForCommand(quiet(cmd));
      await replayCommand(loaded.config, o, print);
    }),
  'feedsync replay --sink mirror --from earliest',
  'feedsync replay --sink webhook --source scheduling --from 41230',
);

const dlq = examples(
  program.command('dlq').description('inspect and replay dead-lettered changes'),
  'feedsync dlq list --sink webhook',
  'feedsync dlq retry --sink webhook --all --dry-run',
);
const dlqActions = {
  list: 'list dead letters (oldest first)',
  retry: 're-queue dead letters with fresh attempts (needs --key, or --all for every match)',
  drop: 'delete dead letters for good (needs --key, or --all for every match)',
} as const;
const dlqExamples: Record<keyof typeof dlqActions, string[]> = {
  list: ['feedsync dlq list', 'feedsync dlq list --sink webhook --limit 20 --json'],
  retry: [
    'feedsync dlq retry --key scheduling:41230',
    'feedsync dlq retry --sink webhook --all --dry-run   # what would be re-queued',
    'feedsync dlq retry --sink webhook --all',
  ],
  drop: ['feedsync dlq drop --sink webhook --key workflow:977', 'feedsync dlq drop --all --dry-run'],
};
for (const action of ['list', 'retry', 'drop'] as const) {
  const c = dlq
    .command(action)
    .description(dlqActions[action])
    .option('--sink <name>', 'only this sink')
    .option('--key <key>', 'only this change key');
  if (action === 'list')
    c.option('--json', 'machine-readable output').option(
      '--limit <n>',
      'at most this many',
      int('--limit', 1),
      100,
    );
  else
    c.addOption(
      new Option('--all', 'act on every dead letter (of --sink, if given)').conflicts('key'),
    ).option('--dry-run', 'print what would be affected, change nothing');
  c.action(
    async (
      o: { sink?: string; key?: string; json?: boolean; limit?: number; all?: boolean; dryRun?: boolean },
      cmd: Command,
    ) => {
      if (action !== 'list' && o.key === undefined && !o.all)
        cmd.error(
          `error: "dlq ${action}" without --key acts on every dead letter${o.sink ? ` of sink "${o.sink}"` : ''}: ` +
            'pass --all to confirm (add --dry-run to see them first)',
          { exitCode: 2, code: 'feedsync.dlq.needsAll' },
        );
      const [{ loadForCommand }, { dlqCommand }] = await Promise.all([
        import('./commands/context.js'),
        import('./commands/dlq.js'),
      ]);
      const { loaded } = loadForCommand(quiet(cmd));
      await dlqCommand(loaded.config, action, o, print);
    },
  );
  examples(c, ...dlqExamples[action]);
}

examples(
  program
    .command('check-config')
    .description('validate the config; print the effective config with secrets redacted; exit 0 or 2')
    .option('--json', 'machine-readable output: {valid, file, config} or {valid, file, errors}')
    .action(async (o: { json?: boolean }, cmd: Command) => {
      const [{ checkConfig }, { defaultConfigPath }] = await Promise.all([
        import('./commands/check-config.js'),
        import('./config/load.js'),
      ]);
      process.exitCode = checkConfig(
        globals(cmd).config ?? defaultConfigPath(process.env),
        process.env,
        print,
        (s) => process.stderr.write(`${s}\n`),
        { json: o.json === true },
      );
    }),
  'feedsync check-config --config config/feedsync.yaml',
  'SCHEDULING_PASSWORD=x feedsync check-config --json | jq .valid',
);

try {
  await program.parseAsync(process.argv);
} catch (err) {
  if (err instanceof CommanderError) {
    // --help and --version exit 0; usage errors are 2 (docs/cli.md, exit codes).
    process.exit(err.exitCode === 0 ? 0 : 2);
  }
  const [{ ConfigError, errorMessage }, { terminalSafe }] = await Promise.all([
    import('./core/errors.js'),
    import('./core/terminal-text.js'),
  ]);
  // A message may quote upstream text (a feed read by `cursor reset --to latest`, say).
  const say = (message: string) =>
    process.stderr.write(`feedsync: ${terminalSafe(message, { newlines: true })}\n`);
  if (err instanceof ConfigError || err instanceof CommandError) {
    say(err.message);
    process.exit(err instanceof ConfigError ? 2 : err.exitCode);
  }
  say(errorMessage(err));
  process.exit(1);
}
