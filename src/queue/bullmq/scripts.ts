// Lua scripts run by SHA. Each script is defined once per connection (ioredis defineCommand): its
// first call on a socket sends the text (EVAL), every later one only its SHA (EVALSHA), and a plain
// call that meets NOSCRIPT (a restarted or failed-over Redis, SCRIPT FLUSH) is sent again as EVAL by
// ioredis itself.
//
// Inside MULTI that fallback cannot work: the EVALSHA is queued, its NOSCRIPT comes back in EXEC's
// reply, and ioredis goes on sending the SHA on that socket. `reloadIfFlushed` is the remedy for a
// transaction: when EXEC reports NOSCRIPT it loads every script the connection defines (BullMQ's
// own among them) and the caller fails the transaction as retryable; the next try runs by SHA
// again. Every transaction using it must be safe to retry (page-commit.ts: fenced and idempotent).
import type { ChainableCommander, Redis } from 'ioredis';

export interface LuaScript {
  /** The command name it is defined under on a connection (distinct from BullMQ's). */
  readonly name: string;
  readonly lua: string;
}

export function luaScript(name: string, lua: string): LuaScript {
  return { name: `feedsync_${name}`, lua };
}

type ScriptCommand = (numberOfKeys: number, ...keysAndArgs: string[]) => Promise<unknown>;
interface WithScripts {
  scriptsSet: Record<string, { lua: string }>;
  defineCommand(name: string, definition: { lua: string }): void;
}

/** Defines `scripts` on `client` unless it has them; a MULTI made afterwards can run them too. */
export function defineScripts(client: Redis, ...scripts: LuaScript[]): void {
  const c = client as unknown as WithScripts;
  for (const s of scripts) if (!c.scriptsSet[s.name]) c.defineCommand(s.name, { lua: s.lua });
}

/** Runs `script` with `keys` and `args` on `client` by SHA (defining it there first if need be). */
export function runScript(
  client: Redis,
  script: LuaScript,
  keys: string[],
  args: string[],
): Promise<unknown> {
  defineScripts(client, script);
  return (client as unknown as Record<string, ScriptCommand>)[script.name]!(keys.length, ...keys, ...args);
}

/** Queues `script` on a MULTI of a client `defineScripts` prepared (before the MULTI was made). */
export function queueScript(tx: ChainableCommander, script: LuaScript, keys: string[], args: string[]): void {
  (tx as unknown as Record<string, ScriptCommand>)[script.name]!(keys.length, ...keys, ...args);
}

/** Whether a command's error says the server lacks the script. */
export function isNoScript(err: unknown): boolean {
  return err instanceof Error && err.message.includes('NOSCRIPT');
}

/**
 * After an EXEC on `node` (the server that ran it): when a command of it failed with NOSCRIPT, loads
 * every script `client` defines onto `node` and returns true (the caller retries the transaction).
 */
export async function reloadIfFlushed(
  client: Redis,
  node: Redis,
  results: readonly [Error | null, unknown][],
): Promise<boolean> {
  if (!results.some(([err]) => isNoScript(err))) return false;
  const scripts = Object.values((client as unknown as WithScripts).scriptsSet);
  await Promise.all(scripts.map((s) => node.script('LOAD', s.lua)));
  return true;
}
