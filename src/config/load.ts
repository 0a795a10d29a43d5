// Loading a config: read the file, parse YAML, substitute ${ENV}, read *_file secrets,
// validate against the schema, then resolve module sink paths against the config's directory.
//
// Relative `store.path` and jsonl/sqlite sink `path`s are kept as written: they resolve against
// the process's working directory when opened. Relative `*_file` and module paths resolve
// against the config file's directory (they name files that ship next to the config).
import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseDocument } from 'yaml';
import type { z } from 'zod';
import { ConfigError, errorMessage } from '../core/errors.js';
import { joinPath, substituteEnv } from './env.js';
import { configSchema, toConfigError, SINK_TYPES, type ConfigIssue } from './schema.js';
import type { FeedsyncConfig, LoadedConfig } from './types.js';

/** `$FEEDSYNC_CONFIG`, else `config/feedsync.yaml` (relative to the working directory). */
export function defaultConfigPath(env: NodeJS.ProcessEnv = process.env): string {
  return env.FEEDSYNC_CONFIG || 'config/feedsync.yaml';
}

/** Reads and validates a config file. Throws ConfigError (naming the file when it is unreadable). */
export function loadConfigFile(file: string, env: NodeJS.ProcessEnv = process.env): LoadedConfig {
  const absolute = resolve(file);
  let text: string;
  try {
    text = readFileSync(absolute, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new ConfigError('', `config file not found: ${absolute}`);
    throw new ConfigError('', `cannot read config file ${absolute}: ${code ?? errorMessage(err)}`);
  }
  return parseConfig(text, { file: absolute, dir: dirname(absolute), env });
}

/** Parses YAML text into a validated config; `dir` is where relative module/secret paths resolve. */
export function parseConfig(
  yamlText: string,
  opts: { file?: string; dir: string; env?: NodeJS.ProcessEnv },
): LoadedConfig {
  const where = opts.file ?? 'config';
  const doc = parseDocument(yamlText, { prettyErrors: true, uniqueKeys: true });
  if (doc.errors.length > 0) {
    // Only the first line of each message: the rest quotes the source text, which may hold a secret.
    const lines = doc.errors.map((e) => `invalid YAML in ${where}: ${e.message.split('\n')[0]}`);
    throw new ConfigError('', lines.join('\n'));
  }
  substituteEnv(doc, opts.env ?? process.env);
  let raw: unknown;
  try {
    raw = doc.toJS({ maxAliasCount: 100 });
  } catch (err) {
    throw new ConfigError('', `invalid YAML in ${where}: ${errorMessage(err)}`);
  }
  const dir = resolve(opts.dir);
  const config = validateConfig(raw, { dir });
  return opts.file === undefined ? { config, dir } : { config, file: opts.file, dir };
}

/** Validates an in-memory config (embedded or programmatic); `*_file` secrets are read too. */
export function validateConfig(raw: unknown, opts: { dir: string }): FeedsyncConfig {
  const dir = resolve(opts.dir);
  if (raw === null || raw === undefined) {
    throw new ConfigError('', 'the configuration is empty (expected a mapping with sources and sinks)');
  }
  if (!isRecord(raw)) {
    throw new ConfigError('', `the configuration must be a mapping, got ${describe(raw)}`);
  }
  const withSecrets = readSecretFiles(raw, dir);
  const result = configSchema.safeParse(withSecrets);
  if (!result.success) throw toConfigError(describeIssues(result.error.issues, withSecrets));
  const config = result.data;
  return {
    ...config,
    sinks: config.sinks.map((sink) =>
      sink.type === 'module' ? { ...sink, module: resolveModulePath(sink.module, dir) } : sink,
    ),
  };
}

function resolveModulePath(specifier: string, dir: string): string {
  if (specifier.startsWith('file:')) {
    try {
      return fileURLToPath(specifier);
    } catch {
      return resolve(dir, specifier);
    }
  }
  return isAbsolute(specifier) ? specifier : resolve(dir, specifier);
}

// --- *_file secrets -------------------------------------------------------------------------

/** Returns a copy of `raw` in which every `<secret>_file` is replaced by `<secret>`. */
function readSecretFiles(raw: Record<string, unknown>, dir: string): Record<string, unknown> {
  const issues: ConfigIssue[] = [];
  const out: Record<string, unknown> = { ...raw };
  if (isRecord(raw.queue)) out.queue = queueFiles(raw.queue, dir, issues);
  if (Array.isArray(raw.sources)) {
    out.sources = raw.sources.map((source, i) =>
      isRecord(source) ? sourceFiles(source, joinPath('sources', i), dir, issues) : source,
    );
  }
  if (Array.isArray(raw.sinks)) {
    // Only webhooks have a secret and only postgres sinks a secret url; elsewhere `secret_file`
    // and `url_file` are left for the schema to reject.
    out.sinks = raw.sinks.map((sink, i) => {
      if (!isRecord(sink)) return sink;
      if (sink.type === 'webhook') return readSecretFile(sink, 'secret', joinPath('sinks', i), dir, issues);
      if (sink.type === 'postgres') {
        const path = joinPath('sinks', i);
        return pemFiles(readSecretFile(sink, 'url', path, dir, issues), path, dir, issues);
      }
      return sink;
    });
  }
  if (issues.length > 0) throw toConfigError(issues);
  return out;
}

/** The queue's `redis_url` from `redis_url_file`; the PEM paths of `redis_tls` made absolute. */
function queueFiles(
  queue: Record<string, unknown>,
  dir: string,
  issues: ConfigIssue[],
): Record<string, unknown> {
  const out = readSecretFile(
    readSecretFile(queue, 'redis_url', 'queue', dir, issues),
    'redis_sentinel_password',
    'queue',
    dir,
    issues,
  );
  if (!isRecord(out.redis_tls)) return out;
  return { ...out, redis_tls: pemFiles(out.redis_tls, joinPath('queue', 'redis_tls'), dir, issues) };
}

/** A source's secrets (`password`, `proxy`) from their `*_file`s; its PEM paths made absolute. */
function sourceFiles(
  source: Record<string, unknown>,
  path: string,
  dir: string,
  issues: ConfigIssue[],
): Record<string, unknown> {
  let out = readSecretFile(source, 'password', path, dir, issues);
  out = readSecretFile(out, 'proxy', path, dir, issues);
  return pemFiles(out, path, dir, issues);
}

/** `ca_file`, `cert_file`, `key_file` made absolute (relative to the config), each checked readable. */
function pemFiles(
  obj: Record<string, unknown>,
  path: string,
  dir: string,
  issues: ConfigIssue[],
): Record<string, unknown> {
  let out = obj;
  for (const key of PEM_FILE_KEYS) {
    const file = out[key];
    if (typeof file !== 'string' || file === '') continue;
    const absolute = resolve(dir, file);
    try {
      readFileSync(absolute);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? 'error';
      issues.push({ path: joinPath(path, key), message: `cannot read ${absolute} (${code})` });
      continue;
    }
    out = { ...out, [key]: absolute };
  }
  return out;
}

const PEM_FILE_KEYS = ['ca_file', 'cert_file', 'key_file'] as const;

function readSecretFile(
  obj: Record<string, unknown>,
  key: string,
  path: string,
  dir: string,
  issues: ConfigIssue[],
): Record<string, unknown> {
  const fileKey = `${key}_file`;
  if (!Object.hasOwn(obj, fileKey)) return obj;
  const filePath = joinPath(path, fileKey);
  const file = obj[fileKey];
  if (Object.hasOwn(obj, key)) {
    issues.push({ path: filePath, message: `give either ${key} or ${fileKey}, not both` });
    return obj;
  }
  if (typeof file !== 'string' || file === '') {
    issues.push({ path: filePath, message: `must be a file path, got ${describe(file)}` });
    return obj;
  }
  const absolute = resolve(dir, file);
  let value: string;
  try {
    value = readFileSync(absolute, 'utf8').trim();
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    issues.push({ path: filePath, message: `cannot read ${absolute} (${code})` });
    return obj;
  }
  if (value === '') {
    issues.push({ path: filePath, message: `${absolute} is empty` });
    return obj;
  }
  const copy: Record<string, unknown> = { ...obj, [key]: value };
  delete copy[fileKey];
  return copy;
}

// --- zod issues → messages that name the key path ---------------------------------------------

type Issue = z.core.$ZodIssue;
const SECRET_KEYS = new Set(['password', 'secret', 'redis_url', 'redis_sentinel_password']);

function describeIssues(issues: readonly Issue[], input: unknown): ConfigIssue[] {
  return issues.flatMap((issue): ConfigIssue[] => {
    const path = formatPath(issue.path);
    if (issue.code === 'unrecognized_keys') {
      return issue.keys.map((key) => ({ path: joinPath(path, key), message: 'unknown key' }));
    }
    const value = valueAt(input, issue.path);
    // A postgres sink's url is a secret: it may come from url_file.
    const parent = valueAt(input, issue.path.slice(0, -1));
    if (
      issue.code === 'invalid_type' &&
      value === undefined &&
      issue.path.at(-1) === 'url' &&
      isRecord(parent) &&
      parent.type === 'postgres'
    )
      return [{ path, message: 'required (or url_file)' }];
    return [{ path, message: describeIssue(issue, value) }];
  });
}

function describeIssue(issue: Issue, value: unknown): string {
  const last = issue.path[issue.path.length - 1];
  switch (issue.code) {
    case 'invalid_union':
      if (issue.discriminator === 'type' && issue.errors.length === 0) {
        const known = SINK_TYPES.join(', ');
        if (value === undefined) return `required (known sink types: ${known})`;
        return `unknown sink type ${JSON.stringify(value)} (known: ${known})`;
      }
      return issue.message;
    case 'invalid_type':
      if (value === undefined) {
        return typeof last === 'string' && SECRET_KEYS.has(last) ? `required (or ${last}_file)` : 'required';
      }
      if (issue.expected === 'int') return `must be an integer, got ${describe(value)}`;
      return `must be ${article(issue.expected)}, got ${describe(value)}`;
    case 'invalid_value':
      if (issue.values.length === 1) return `must be ${JSON.stringify(issue.values[0])}`;
      return `must be one of: ${issue.values.map(String).join(', ')}`;
    case 'too_small':
      if (issue.origin === 'number') return `must be >= ${String(issue.minimum)}`;
      return issue.message;
    case 'too_big':
      if (issue.origin === 'number') return `must be <= ${String(issue.maximum)}`;
      return issue.message;
    default:
      return issue.message;
  }
}

function article(expected: string): string {
  if (expected === 'array') return 'a list';
  if (expected === 'object') return 'a mapping';
  return /^[aeiou]/.test(expected) ? `an ${expected}` : `a ${expected}`;
}

/** A value's kind, never the value itself (it could be a secret). */
function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (value instanceof Uint8Array) return 'binary data';
  if (value instanceof Map || value instanceof Set) return 'a YAML set/map';
  if (typeof value === 'object') return 'a mapping';
  if (typeof value === 'number' && !Number.isInteger(value)) return 'a fraction';
  return typeof value === 'number' || typeof value === 'boolean' || typeof value === 'string'
    ? `a ${typeof value}`
    : typeof value;
}

function formatPath(path: readonly PropertyKey[]): string {
  return path.reduce<string>((acc, key) => joinPath(acc, typeof key === 'number' ? key : String(key)), '');
}

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let current: unknown = input;
  for (const key of path) {
    if (current === null || typeof current !== 'object') return undefined;
    if (!Object.hasOwn(current, key)) return undefined;
    current = (current as Record<PropertyKey, unknown>)[key];
  }
  return current;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Map);
}
