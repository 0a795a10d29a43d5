#!/usr/bin/env node
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { checkConfig } from './commands/check-config.js';
import { loadForCommand, type GlobalOptions } from './commands/context.js';
import { CommandError, cursorCommand } from './commands/cursor.js';
import { daemonCommand } from './commands/daemon-command.js';
import { demoCommand } from './commands/demo.js';
import { dlqCommand } from './commands/dlq.js';
import { sandboxCommand } from './commands/sandbox.js';
import { statusCommand } from './commands/status.js';
import { defaultConfigPath } from './config/load.js';
import { ConfigError, errorMessage } from './core/errors.js';
import { version } from './version.js';

const print = (s: string) => process.stdout.write(`${s}\n`);

function int(name: string, min = 0) {
  return (value: string) => {
    const n = Number(value);
    if (!/^-?\d+$/.test(value) || n < min)
      throw new InvalidArgumentError(`${name} must be an integer ≥ ${min}`);
    return n;
  };
}
function probability(value: string) {
  const n = Number(value);
  if (!(n >= 0 && n <= 1)) throw new InvalidArgumentError('must be a number from 0 to 1');
  return n;
}

const program = new Command('feedsync')
  .description('Keeps other systems in sync with the scheduling and job-workflow change-event feeds')
  .version(version)
  .option('--config <file>', 'config file (default: $FEEDSYNC_CONFIG, else config/feedsync.yaml)')
  .option('--pretty', 'human-friendly log output (default when stdout is a terminal)')
  .showHelpAfterError()
  .exitOverride();

const globals = (): GlobalOptions => program.opts<GlobalOptions>();

for (const [mode, description] of [
  ['run', 'pollers and sink workers in one process (the default deployment)'],
  ['poll', 'pollers only, enqueueing into BullMQ (needs queue.driver: bullmq)'],
  ['work', 'sink workers only, consuming BullMQ; stateless, scale horizontally'],
] as const) {
  program
    .command(mode)
    .description(description)
    .action(() => daemonCommand(mode, globals()));
}

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
  .action((o: { port: number; seed: number; backlog: number; rate: number; faultRate: number }) =>
    sandboxCommand({ port: o.port, seed: o.seed, backlog: o.backlog, rate: o.rate, faultRate: o.faultRate }),
  );

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
  .action((o: { backlog: number; rate: number; seed: number; duration?: number; dir?: string }) =>
    demoCommand(o, print),
  );

program
  .command('status')
  .description('per source: cursor, last poll, behind or caught up; per sink: queued, failed, dead letters')
  .option('--json', 'machine-readable output')
  .action(async (o: { json?: boolean }) => {
    const { loaded } = loadForCommand({ ...globals(), pretty: false });
    await statusCommand(loaded.config, o.json === true, print);
  });

const cursor = program
  .command('cursor')
  .description('inspect or move a cursor (refuses while a poller holds the source)');
cursor
  .command('show')
  .action(async () => cursorCommand(loadForCommand(globals()).loaded.config, 'show', {}, print));
cursor
  .command('set <source> <id>')
  .action(async (source: string, id: string) =>
    cursorCommand(loadForCommand(globals()).loaded.config, 'set', { source, id }, print),
  );
cursor
  .command('reset <source>')
  .addOption(
    new Option('--to <where>', 'latest or earliest').choices(['latest', 'earliest']).makeOptionMandatory(),
  )
  .action(async (source: string, o: { to: string }) =>
    cursorCommand(loadForCommand(globals()).loaded.config, 'reset', { source, to: o.to }, print),
  );

const dlq = program.command('dlq').description('inspect and replay dead-lettered changes');
for (const action of ['list', 'retry', 'drop'] as const) {
  const c = dlq
    .command(action)
    .option('--sink <name>', 'only this sink')
    .option('--key <key>', 'only this change key');
  if (action === 'list')
    c.option('--json', 'machine-readable output').option(
      '--limit <n>',
      'at most this many',
      int('--limit', 1),
      100,
    );
  c.action(async (o: { sink?: string; key?: string; json?: boolean; limit?: number }) =>
    dlqCommand(loadForCommand(globals()).loaded.config, action, o, print),
  );
}

program
  .command('check-config')
  .description('validate the config; print the effective config with secrets redacted; exit 0 or 2')
  .action(() => {
    process.exitCode = checkConfig(
      globals().config ?? defaultConfigPath(process.env),
      process.env,
      print,
      (s) => process.stderr.write(`${s}\n`),
    );
  });

try {
  await program.parseAsync(process.argv);
} catch (err) {
  if (err instanceof CommanderError) {
    // --help and --version exit 0; usage errors are 2 (README "Command line").
    process.exit(err.exitCode === 0 ? 0 : 2);
  }
  if (err instanceof ConfigError || err instanceof CommandError) {
    process.stderr.write(`feedsync: ${err.message}\n`);
    process.exit(err instanceof ConfigError ? 2 : 1);
  }
  process.stderr.write(`feedsync: ${errorMessage(err)}\n`);
  process.exit(1);
}
