// `${NAME}` and `${NAME:-default}` substitution, done on the YAML syntax tree rather than on the text so that a value
// containing `:`, `#` or quotes can never change the structure of the document.
import { isAlias, isMap, isPair, isScalar, isSeq, type Document, type Node, Scalar } from 'yaml';
import { toConfigError, type ConfigIssue } from './schema.js';

/** `$${NAME}` is the escape for a literal `${NAME}`; any other `${...}` must name a variable. */
const REFERENCE = /\$(\$?)\{([^}]*)\}/g;
/** What goes between the braces: a name, optionally `:-` and a default (which cannot hold `}`). */
const VALID_REFERENCE = /^([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?$/s;
const WHOLE_REFERENCE = /^\$\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\}$/;

/** Appends a map key or sequence index to a key path: `sources` + 1 → `sources[1]`. */
export function joinPath(parent: string, key: string | number): string {
  if (typeof key === 'number') return `${parent}[${key}]`;
  return parent ? `${parent}.${key}` : key;
}

/**
 * Replaces every `${NAME}` in the document's scalar values (not keys) by `env[NAME]`, in place.
 * `${NAME:-default}` is `default` when NAME is unset or empty, as in POSIX shells and Docker
 * Compose (`${NAME:-}` is the empty string); only a plain `${NAME}` that is unset is an error.
 * A plain (unquoted) scalar that was exactly one reference is re-read as a YAML scalar (except an
 * empty default, which stays ''), so
 * `port: ${PORT}` yields a number and `expand_subject: ${X}` a boolean; quote it
 * (`password: "${PW}"`) to keep the value a string whatever it looks like.
 * Throws one ConfigError listing every unset or malformed reference.
 */
export function substituteEnv(doc: Document, env: NodeJS.ProcessEnv): void {
  const issues: ConfigIssue[] = [];
  visit(doc.contents, '', env, issues, new Set());
  if (issues.length > 0) throw toConfigError(issues);
}

function visit(
  node: Node | null | undefined | unknown,
  path: string,
  env: NodeJS.ProcessEnv,
  issues: ConfigIssue[],
  seen: Set<unknown>,
): void {
  // An anchor reached twice through aliases is one node: substitute it once.
  if (node === null || node === undefined || seen.has(node)) return;
  seen.add(node);
  if (isAlias(node)) return;
  if (isScalar(node)) {
    substituteScalar(node, path, env, issues);
  } else if (isMap(node)) {
    for (const item of node.items) {
      if (!isPair(item)) continue;
      visit(item.value, joinPath(path, keyName(item.key)), env, issues, seen);
    }
  } else if (isSeq(node)) {
    node.items.forEach((item, i) => visit(item, joinPath(path, i), env, issues, seen));
  }
}

function keyName(key: unknown): string {
  if (isScalar(key)) return String(key.value);
  return String(key);
}

function substituteScalar(node: Scalar, path: string, env: NodeJS.ProcessEnv, issues: ConfigIssue[]): void {
  if (typeof node.value !== 'string' || !node.value.includes('$')) return;
  const source = node.value;
  let failed = false;
  let emptyByDefault = false;
  const replaced = source.replace(REFERENCE, (whole, escape: string, inner: string) => {
    if (escape) return whole.slice(1);
    const reference = VALID_REFERENCE.exec(inner);
    if (!reference) {
      issues.push({ path, message: `invalid environment variable reference "\${${inner}}"` });
      failed = true;
      return whole;
    }
    const [, name = '', fallback] = reference;
    const value = env[name];
    if (fallback !== undefined && (value === undefined || value === '')) {
      emptyByDefault = fallback === '';
      return fallback;
    }
    if (value === undefined) {
      issues.push({ path, message: `environment variable ${name} is not set` });
      failed = true;
      return whole;
    }
    return value;
  });
  if (failed) return;
  // `key: ${NAME:-}` asks for the empty string, not for YAML's empty plain scalar (null).
  const retype = node.type === Scalar.PLAIN && WHOLE_REFERENCE.test(source) && !emptyByDefault;
  node.value = retype ? resolvePlainScalar(replaced) : replaced;
}

const NULL = /^(?:~|null|Null|NULL|)$/;
const TRUE = /^(?:true|True|TRUE)$/;
const FALSE = /^(?:false|False|FALSE)$/;
const DECIMAL_INT = /^[-+]?[0-9]+$/;
const OCTAL_INT = /^0o[0-7]+$/;
const HEX_INT = /^0x[0-9a-fA-F]+$/;
const FLOAT = /^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$/;

/**
 * What a plain scalar with this text would be under the YAML 1.2 core schema (the `yaml`
 * package's default). Only scalars: a value that looks like a mapping or sequence stays a string.
 */
export function resolvePlainScalar(text: string): string | number | boolean | null {
  if (NULL.test(text)) return null;
  if (TRUE.test(text)) return true;
  if (FALSE.test(text)) return false;
  if (DECIMAL_INT.test(text)) return Number(text);
  if (OCTAL_INT.test(text)) return parseInt(text.slice(2), 8);
  if (HEX_INT.test(text)) return parseInt(text.slice(2), 16);
  if (FLOAT.test(text)) return Number(text);
  return text;
}
