// The process logger: pino JSON lines on stdout, or pino-pretty for humans. Credentials are kept
// out twice: pino `redact` censors the keys that hold them, and a final text pass removes any
// known secret value and any URL userinfo wherever it ended up (messages, nested objects, errors).
import { createRequire } from 'node:module';
import { pino, type Logger as PinoLogger, type DestinationStream } from 'pino';
import type pinoPrettyModule from 'pino-pretty';
import { createTextRedactor, REDACTED } from './redact-text.js';

export type Logger = PinoLogger;

export interface LoggerOptions {
  /** A pino level: fatal, error, warn, info, debug, trace, silent. */
  level: string;
  /** Human-readable output (the CLI sets it when stdout is a TTY or on --pretty). */
  pretty?: boolean;
  /** Secret values (passwords, webhook secrets, Redis URLs) that must never be written. */
  secrets?: string[];
  /** Where lines go: a stream, or a file descriptor. Default: stdout (fd 1). */
  destination?: NodeJS.WritableStream | number;
}

const LEVELS = new Set(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']);

/** Keys whose values are credentials wherever they appear in a logged object. */
export const REDACT_PATHS = [
  'password',
  '*.password',
  'secret',
  '*.secret',
  'authorization',
  '*.authorization',
  'headers.authorization',
  '*.headers.authorization',
  'headers.Authorization',
  '*.headers.Authorization',
  'redis_url',
  '*.redis_url',
  'redis_sentinel_password',
  '*.redis_sentinel_password',
];

export function createLogger(opts: LoggerOptions): Logger {
  if (!LEVELS.has(opts.level)) {
    throw new Error(`log.level: unknown level "${opts.level}" (expected one of ${[...LEVELS].join(', ')})`);
  }
  const scrub = createTextRedactor(opts.secrets ?? []);
  const destination = resolveDestination(opts);
  return pino(
    {
      level: opts.level,
      redact: { paths: REDACT_PATHS, censor: REDACTED },
      // streamWrite sees the finished JSON line, so it catches secrets that no key path names.
      hooks: { streamWrite: scrub },
    },
    destination,
  );
}

function resolveDestination(opts: LoggerOptions): DestinationStream | NodeJS.WritableStream {
  const target = opts.destination ?? 1;
  if (opts.pretty) {
    // Loaded only for humans: a daemon logging JSON never pays for it at start-up.
    const pinoPretty = createRequire(import.meta.url)('pino-pretty') as typeof pinoPrettyModule;
    // Synchronous so that lines written just before exit are not lost; log volume is modest.
    return pinoPretty({
      destination: target,
      sync: true,
      // Colours only on a terminal; a captured stream gets plain text.
      colorize: typeof target === 'number' ? pinoPretty.isColorSupported : false,
      translateTime: 'SYS:standard',
    });
  }
  if (typeof target === 'number') return pino.destination({ dest: target, sync: true });
  return target;
}
