// undici's Pool and Client, loaded without undici's index: the index also builds fetch, WebSocket,
// EventSource, the cache stores and more at load time, none of which feedsync uses, and that was
// part of every start (docs/performance.md). Without the index the dispatchers lack the API methods
// it mixes in (`request()`, `stream()`…): feedsync only calls `dispatch` (src/upstream/dispatch.ts).
// undici has no `exports` map, so these paths are importable; a test checks they still are the
// classes `undici` exports.
import type { Client as UndiciClient, Pool as UndiciPool } from 'undici';
import ClientClass from 'undici/lib/dispatcher/client.js';
import PoolClass from 'undici/lib/dispatcher/pool.js';

export const Client = ClientClass as unknown as typeof UndiciClient;
export type Client = UndiciClient;
export const Pool = PoolClass as unknown as typeof UndiciPool;
export type Pool = UndiciPool;
