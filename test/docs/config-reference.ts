// The configuration reference (docs/reference/configuration.md) is rendered from the zod schema,
// so it cannot drift from what the code accepts: types, defaults and allowed values come from the
// schema's JSON Schema, and only the prose comes from docs/reference/config-keys.yaml.
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { parse } from 'yaml';
import { configSchema } from '../../src/config/schema.js';

type JsonSchema = {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  items?: JsonSchema;
  oneOf?: JsonSchema[];
  anyOf?: JsonSchema[];
  enum?: unknown[];
  const?: unknown;
  default?: unknown;
  required?: string[];
  minimum?: number;
  maximum?: number;
  additionalProperties?: unknown;
};

export interface KeyFacts {
  /** `queue.shards`, `sources[].base_url`, `sinks[type=webhook].url`. */
  path: string;
  type: string;
  default?: unknown;
  required: boolean;
}

export interface KeyDoc {
  text: string;
  /** For keys whose default is computed (the schema cannot state it). */
  default?: string;
}

const SINK_VARIANT = /^sinks\[type=([a-z]+)\]$/;

/** Every leaf key the schema accepts, in schema order; a sink key every type shares is `sinks[].key`. */
export function schemaKeys(): KeyFacts[] {
  const root = z.toJSONSchema(configSchema, { io: 'input', unrepresentable: 'any' }) as JsonSchema;
  const out: KeyFacts[] = [];
  walkObject(root, '', out);
  return foldSharedSinkKeys(out);
}

function walkObject(node: JsonSchema, prefix: string, out: KeyFacts[]): void {
  const required = new Set(node.required ?? []);
  for (const [key, child] of Object.entries(node.properties ?? {})) {
    const path = prefix === '' ? key : `${prefix}.${key}`;
    walk(child, path, required.has(key), out);
  }
}

function walk(node: JsonSchema, path: string, required: boolean, out: KeyFacts[]): void {
  const variants = node.items?.oneOf ?? node.items?.anyOf;
  if (node.type === 'array' && variants) {
    for (const variant of variants) {
      const type = variant.properties?.type?.const;
      walkObject(variant, `${path}[type=${String(type)}]`, out);
    }
    return;
  }
  if (node.type === 'array' && node.items?.type === 'object' && node.items.properties) {
    walkObject(node.items, `${path}[]`, out);
    return;
  }
  // filter is a small fixed object: documented as its keys.
  if (node.type === 'object' && node.properties && Object.keys(node.properties).length > 0) {
    walkObject(node, path, out);
    return;
  }
  out.push({ path, type: describeType(node), default: node.default, required });
}

function describeType(node: JsonSchema): string {
  if (node.const !== undefined) return JSON.stringify(node.const);
  if (node.enum) return node.enum.map((v) => JSON.stringify(v)).join(' | ');
  if (node.type === 'array') return `list of ${node.items ? describeType(node.items) : 'any'}`;
  if (node.type === 'integer') {
    const min = node.minimum !== undefined && node.minimum > 0 ? ` ≥ ${node.minimum}` : '';
    const max =
      node.maximum !== undefined && node.maximum < Number.MAX_SAFE_INTEGER ? ` ≤ ${node.maximum}` : '';
    return `integer${min}${max}`;
  }
  if (node.type === 'object') return 'map';
  if (typeof node.type === 'string') return node.type;
  return 'see text';
}

/** A key every sink type has with the same facts is listed once, as `sinks[].key`. */
function foldSharedSinkKeys(keys: KeyFacts[]): KeyFacts[] {
  const types = new Set<string>();
  for (const k of keys) {
    const m = SINK_VARIANT.exec(k.path.split('.')[0]!);
    if (m) types.add(m[1]!);
  }
  const byRest = new Map<string, KeyFacts[]>();
  for (const k of keys) {
    const [head, ...rest] = k.path.split('.');
    if (!SINK_VARIANT.test(head!)) continue;
    const r = rest.join('.');
    byRest.set(r, [...(byRest.get(r) ?? []), k]);
  }
  const shared = new Set(
    [...byRest]
      .filter(
        ([rest, list]) =>
          rest !== 'type' &&
          list.length === types.size &&
          list.every((k) => JSON.stringify({ ...k, path: '' }) === JSON.stringify({ ...list[0]!, path: '' })),
      )
      .map(([rest]) => rest),
  );
  const out: KeyFacts[] = [];
  const emitted = new Set<string>();
  for (const k of keys) {
    const [head, ...restParts] = k.path.split('.');
    const rest = restParts.join('.');
    if (SINK_VARIANT.test(head!) && (shared.has(rest) || rest === 'type')) {
      const path = rest === 'type' ? 'sinks[].type' : `sinks[].${rest}`;
      if (emitted.has(path)) continue;
      emitted.add(path);
      out.push(
        rest === 'type'
          ? { path, type: [...types].map((t) => JSON.stringify(t)).join(' | '), required: true }
          : { ...k, path },
      );
      continue;
    }
    out.push(k);
  }
  return out;
}

export function loadKeyDocs(file: string): Map<string, KeyDoc> {
  const raw = parse(readFileSync(file, 'utf8')) as Record<string, string | KeyDoc>;
  return new Map(Object.entries(raw).map(([k, v]) => [k, typeof v === 'string' ? { text: v } : v]));
}

function section(path: string): string {
  const head = path.split('.')[0]!;
  if (!path.includes('.')) return 'Top level';
  if (head.startsWith('sinks[type=')) return `Sink type \`${SINK_VARIANT.exec(head)![1]}\``;
  if (head === 'sinks[]') return 'Every sink (`sinks[]`)';
  if (head === 'sources[]') return 'Sources (`sources[]`)';
  return `\`${head}\``;
}

function showDefault(k: KeyFacts, doc: KeyDoc | undefined): string {
  if (doc?.default !== undefined) return doc.default;
  if (
    k.default !== undefined &&
    !(
      typeof k.default === 'object' &&
      k.default !== null &&
      Object.keys(k.default).length === 0 &&
      !Array.isArray(k.default)
    )
  )
    return `\`${JSON.stringify(k.default)}\``;
  return k.required ? '*required*' : '—';
}

const cell = (text: string) => text.replace(/\|/g, '\\|').replace(/\n+/g, ' ').trim();

export function renderConfigReference(keys: KeyFacts[], docs: Map<string, KeyDoc>): string {
  const lines = [
    '# Configuration reference',
    '',
    '<!-- Generated from src/config/schema.ts and docs/reference/config-keys.yaml by',
    '     test/docs/docs.test.ts; edit those, then run `npx vitest run test/docs -u`. -->',
    '',
    'YAML, from `--config FILE`, else `$FEEDSYNC_CONFIG`, else `config/feedsync.yaml`. Unknown keys are',
    'errors; every command validates the file the same way and exits 2 naming the key and the reason.',
    '`${NAME}` in any scalar is replaced by the environment variable (`${NAME:-default}` when unset or',
    "empty); a secret (`password`, `secret`, `redis_url`, `redis_sentinel_password`, a source's `proxy`,",
    "a postgres sink's `url`) may instead be given as `<key>_file`, a file whose trimmed contents are",
    'the value. Durations are integers in milliseconds (`*_ms`). How to write a first config:',
    '[getting started](../getting-started.md).',
  ];
  let current = '';
  for (const k of keys) {
    const s = section(k.path);
    if (s !== current) {
      current = s;
      lines.push('', `## ${s}`, '', '| key | type | default | meaning |', '|---|---|---|---|');
    }
    const doc = docs.get(k.path);
    lines.push(
      `| \`${k.path}\` | ${cell(k.type)} | ${cell(showDefault(k, doc))} | ${cell(doc?.text ?? '')} |`,
    );
  }
  return `${lines.join('\n')}\n`;
}
