// undici's Pool and Client, loaded without undici's index: the index also builds fetch, WebSocket,
// EventSource, the cache stores and more at load time, none of which feedsync uses, and that was
// part of every start (docs/performance.md). Without the index the dispatchers lack the API methods
// it mixes in (`request()`, `stream()`…): feedsync only calls `dispatch` (src/upstream/dispatch.ts).
// undici has no `exports` map, so these paths are importable; a test checks they still are the
// classes `undici` exports.
import type {
  Client as UndiciClient,
  Dispatcher,
  EnvHttpProxyAgent as UndiciEnvHttpProxyAgent,
  Pool as UndiciPool,
  ProxyAgent as UndiciProxyAgent,
} from 'undici';
import ClientClass from 'undici/lib/dispatcher/client.js';
import PoolClass from 'undici/lib/dispatcher/pool.js';

export const Client = ClientClass as unknown as typeof UndiciClient;
export type Client = UndiciClient;
export const Pool = PoolClass as unknown as typeof UndiciPool;
export type Pool = UndiciPool;

export interface ProxyClasses {
  ProxyAgent: typeof UndiciProxyAgent;
  EnvHttpProxyAgent: typeof UndiciEnvHttpProxyAgent;
  /**
   * The ProxyAgent `clientFactory`: its connection to the proxy opens CONNECT tunnels with the
   * dispatcher's `connect()`, one of the API methods undici's index mixes in (see above): this pool
   * gets that one, by path as well.
   */
  proxyClient(origin: URL, opts: object): Dispatcher;
}

let proxyClasses: Promise<ProxyClasses> | undefined;

/**
 * undici's proxy dispatchers, loaded (by path, like Pool and Client) only when a source uses a
 * proxy: most deployments never do, and they then pay nothing for them at start-up.
 */
export function loadProxyClasses(): Promise<ProxyClasses> {
  proxyClasses ??= Promise.all([
    import('undici/lib/dispatcher/proxy-agent.js'),
    import('undici/lib/dispatcher/env-http-proxy-agent.js'),
    import('undici/lib/api/api-connect.js'),
  ]).then(
    ([proxy, env, apiConnect]) => ({
      ProxyAgent: proxy.default as unknown as typeof UndiciProxyAgent,
      EnvHttpProxyAgent: env.default as unknown as typeof UndiciEnvHttpProxyAgent,
      proxyClient: (origin, opts) =>
        Object.assign(new Pool(origin, opts), { connect: apiConnect.default as UndiciPool['connect'] }),
    }),
    (err: unknown) => {
      proxyClasses = undefined;
      throw err;
    },
  );
  return proxyClasses;
}
