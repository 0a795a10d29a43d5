// Lua scripts run by SHA. Each script is defined once per connection (ioredis defineCommand): its
// first call on a socket sends the text (EVAL), every later one only its SHA (EVALSHA), and a plain
// call that meets NOSCRIPT (a restarted or failed-over Redis, SCRIPT FLUSH) is sent again as EVAL by
// ioredis itself.
//
// Inside MULTI that fallback cannot work: the EVALSHA is queued, its NOSCRIPT comes back in EXEC's
// reply, and ioredis goes on sending the SHA on that socket. So the script that decides a
// transaction (the cursor script of a page commit, which checks that every job of the page got in)
// is queued as its text (`queueScript`: EVAL), and cannot meet NOSCRIPT: a transaction then either
// lost BullMQ's adds to NOSCRIPT, and its script refuses it, or goes through whole. Never its jobs
// without its cursor. `reconnectIfFlushed` then has the connection reconnect (a new socket sends
// each of BullMQ's scripts' text once again; `SCRIPT LOAD` would need a permission the documented
// ACL user does not have) and the caller retries the transaction.
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

/** Defines `scripts` on `client` unless it has them. */
function defineScripts(client: Redis, ...scripts: LuaScript[]): void {
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

/** Queues `script` on a MULTI as its text (EVAL): it cannot fail with NOSCRIPT (see above). */
export function queueScript(tx: ChainableCommander, script: LuaScript, keys: string[], args: string[]): void {
  tx.eval(script.lua, keys.length, ...keys, ...args);
}

/** Whether a command's error says the server lacks the script. */
export function isNoScript(err: unknown): boolean {
  return err instanceof Error && err.message.includes('NOSCRIPT');
}

/** How long a reconnect after NOSCRIPT is waited for before the caller's retry takes over. */
const RECONNECT_WAIT_MS = 2_000;

/**
 * After an EXEC on `connection`: when a command of it failed with NOSCRIPT, reconnects `connection`
 * (waiting a little for it to be ready again) and returns true: the caller fails the transaction as
 * retryable.
 */
export async function reconnectIfFlushed(
  connection: Redis,
  results: readonly [Error | null, unknown][],
): Promise<boolean> {
  if (!results.some(([err]) => isNoScript(err))) return false;
  let onReady = (): void => undefined;
  const ready = new Promise<void>((resolve) => (onReady = resolve));
  connection.once('ready', onReady);
  connection.disconnect(true);
  const timer = setTimeout(onReady, RECONNECT_WAIT_MS);
  await ready;
  clearTimeout(timer);
  connection.off('ready', onReady);
  return true;
}
