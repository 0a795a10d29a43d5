// The process logger: pino JSON lines on stdout, or pino-pretty for humans. Credentials are kept
// out twice: pino `redact` censors the keys that hold them, and a final text pass removes any
// known secret value and any URL credential wherever it ended up (messages, nested objects, errors).
//
// Lines are bounded, whatever a call site logs: every string is cut to MAX_LOG_FIELD_CHARS before
// the line is built (a field holding upstream text cannot make the scrubbing pass, or a log
// shipper, work on megabytes), and a line still over MAX_LOG_LINE_BYTES is cut down field by field.
import { createRequire } from 'node:module';
import { pino, type Logger as PinoLogger, type DestinationStream, type LogFn } from 'pino';
import type pinoPrettyModule from 'pino-pretty';
import { cut } from '../core/bounded-text.js';
import { terminalSafe } from '../core/terminal-text.js';
import { createTextRedactor, REDACTED, type TextRedactor } from './redact-text.js';

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

/** The longest string a log line holds (a message, a field, an error's stack), in characters. */
export const MAX_LOG_FIELD_CHARS = 4096;
/**
 * The longest log line written, in bytes with its newline: 16 KiB, the size at which common log
 * collectors (Docker's json-file driver, for one) split a line into pieces.
 */
export const MAX_LOG_LINE_BYTES = 16 * 1024;

/** Logged objects are copied at most this deep, with at most this many keys or items each. */
const MAX_DEPTH = 8;
const MAX_ENTRIES = 100;

export function createLogger(opts: LoggerOptions): Logger {
  if (!LEVELS.has(opts.level)) {
    throw new Error(`log.level: unknown level "${opts.level}" (expected one of ${[...LEVELS].join(', ')})`);
  }
  const scrub = createTextRedactor(opts.secrets ?? []);
  const destination = resolveDestination(opts);
  const bound = (text: string) => cutField(text, scrub);
  return pino(
    {
      level: opts.level,
      redact: { paths: REDACT_PATHS, censor: REDACTED },
      formatters: { log: (object) => boundObject(object, bound, 0) as Record<string, unknown> },
      hooks: {
        logMethod(args, method) {
          method.apply(this, boundArguments(args, bound));
        },
        // streamWrite sees the finished JSON line, so it catches secrets that no key path names.
        streamWrite: (line) => {
          const safe = boundLine(scrub(line));
          return opts.pretty ? forTerminal(safe) : safe;
        },
      },
    },
    destination,
  );
}

/**
 * `text` cut to MAX_LOG_FIELD_CHARS. What is kept is scrubbed before the cut, with enough after
 * the cut point that a secret straddling it is recognised whole (never shown in part); the
 * scrubbing pass itself only ever sees a bounded text.
 */
function cutField(text: string, scrub: TextRedactor): string {
  if (text.length <= MAX_LOG_FIELD_CHARS) return text;
  const head = text.slice(0, MAX_LOG_FIELD_CHARS + scrub.reach);
  return cut(scrub(head), MAX_LOG_FIELD_CHARS, text.length - head.length);
}

/** The log method's arguments with strings (the message, printf arguments) bounded. */
function boundArguments(args: Parameters<LogFn>, bound: (text: string) => string): Parameters<LogFn> {
  const [first, msg] = args;
  // pino would take an error's message whole as the line's message.
  if (first instanceof Error && typeof msg !== 'string') return [{ err: first }, bound(first.message)];
  return args.map((a) => (typeof a === 'string' ? bound(a) : a)) as Parameters<LogFn>;
}

/**
 * A copy of a logged value, bounded in depth, width, string length and in all (once `budget` is
 * spent, what is left is left out).
 */
function boundObject(
  value: unknown,
  bound: (text: string) => string,
  depth: number,
  budget = { chars: 4 * MAX_LOG_LINE_BYTES },
): unknown {
  if (budget.chars <= 0) return '…';
  if (typeof value === 'string') {
    const kept = bound(value);
    budget.chars -= kept.length;
    return kept;
  }
  budget.chars -= 8;
  if (typeof value !== 'object' || value === null) return value;
  if (depth >= MAX_DEPTH) return Array.isArray(value) ? '[list]' : '[object]';
  if (Array.isArray(value)) {
    const items = value.slice(0, MAX_ENTRIES).map((v) => boundObject(v, bound, depth + 1, budget));
    if (value.length > MAX_ENTRIES) items.push(`…[${value.length - MAX_ENTRIES} more items]`);
    return items;
  }
  const source = value as Record<string, unknown>;
  // An error stays an instance of its class (pino's serializer names it by its constructor), with
  // its message, stack and cause bounded like the rest.
  const out: Record<string, unknown> =
    value instanceof Error ? Object.create(Object.getPrototypeOf(value) as object) : {};
  if (value instanceof Error) {
    const hidden = (v: unknown) => ({ value: v, writable: true, configurable: true, enumerable: false });
    Object.defineProperties(out, {
      message: hidden(bound(value.message)),
      stack: hidden(bound(value.stack ?? '')),
      ...(value.cause !== undefined && { cause: hidden(boundObject(value.cause, bound, depth + 1, budget)) }),
    });
  }
  let n = 0;
  for (const key of Object.keys(source)) {
    if (n++ === MAX_ENTRIES || budget.chars <= 0) {
      out['…'] = 'more keys left out';
      break;
    }
    const name = bound(key);
    budget.chars -= name.length;
    out[name] = boundObject(source[key], bound, depth + 1, budget);
  }
  return out;
}

/** pino's own fields and the message come first when a line has to be cut down. */
const FIRST_KEYS = ['level', 'time', 'pid', 'hostname', 'source', 'sink', 'msg'];

/**
 * A line over MAX_LOG_LINE_BYTES, rebuilt: its fields in order while they fit, a field that does
 * not fit cut to what is left (its JSON text when it is not a string), and `log_line_cut` giving
 * the size of the line as it would have been.
 */
function boundLine(line: string): string {
  if (line.length * 3 < MAX_LOG_LINE_BYTES || Buffer.byteLength(line) <= MAX_LOG_LINE_BYTES) return line;
  let entry: Record<string, unknown>;
  try {
    entry = JSON.parse(line) as Record<string, unknown>;
  } catch {
    entry = { msg: line };
  }
  const out: Record<string, unknown> = {};
  // Room for `"log_line_cut":N`, the braces and the newline.
  let room = MAX_LOG_LINE_BYTES - 64;
  const keys = [
    ...FIRST_KEYS.filter((k) => k in entry),
    ...Object.keys(entry).filter((k) => !FIRST_KEYS.includes(k)),
  ];
  for (const key of keys) {
    const value = entry[key];
    let size = Buffer.byteLength(JSON.stringify(value)) + Buffer.byteLength(JSON.stringify(key)) + 2;
    if (size <= room) {
      out[key] = value;
      room -= size;
      continue;
    }
    // A character may take up to 6 bytes once JSON-escaped.
    const chars = Math.floor((room - JSON.stringify(key).length - 40) / 6);
    if (chars < 16) continue;
    const shortened = cut(typeof value === 'string' ? value : JSON.stringify(value), chars);
    size = Buffer.byteLength(JSON.stringify(shortened)) + Buffer.byteLength(JSON.stringify(key)) + 2;
    out[key] = shortened;
    room -= size;
  }
  out.log_line_cut = Buffer.byteLength(line);
  return `${JSON.stringify(out)}\n`;
}

/**
 * For pino-pretty on a terminal: strings with their control characters escaped (pretty output
 * writes them raw), a stack's line breaks excepted.
 */
function forTerminal(line: string): string {
  let entry: unknown;
  try {
    entry = JSON.parse(line);
  } catch {
    return `${terminalSafe(line.trimEnd())}\n`;
  }
  const clean = (value: unknown, key?: string): unknown => {
    if (typeof value === 'string') return terminalSafe(value, { newlines: key === 'stack' });
    if (Array.isArray(value)) return value.map((v) => clean(v));
    if (typeof value !== 'object' || value === null) return value;
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [terminalSafe(k), clean(v, k)]));
  };
  return `${JSON.stringify(clean(entry))}\n`;
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
