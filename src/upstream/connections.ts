// How a source's requests reach an upstream origin: a keep-alive Pool straight to it (the common
// case and the fast path), or undici's ProxyAgent (the source's `proxy`) / EnvHttpProxyAgent
// (HTTPS_PROXY, HTTP_PROXY, NO_PROXY) when a proxy applies, with the source's private PKI
// (`ca_file`, `cert_file` + `key_file`) on the TLS connections to upstream either way.
import { readFileSync } from 'node:fs';
import { createSecureContext, type SecureContext } from 'node:tls';
import type { Dispatcher } from 'undici';
import { redactUrlPassword } from '../config/redact.js';
import { ConfigError, FeedsyncError } from '../core/errors.js';
import type { PooledDispatcher } from './transport.js';
import { Client, loadProxyClasses, Pool } from './undici-dispatchers.js';

export interface ConnectionOptions {
  /** Source name, for error messages. */
  source: string;
  /** Keep-alive connections per origin. */
  connections: number;
  /** Per request; undici's own header/body timeouts are set to it as backstops. */
  timeoutMs: number;
  /** Forward proxy for every request (http(s) URL, may carry user:password); absent: the env's. */
  proxy?: string;
  /** PEM CA bundle; see `tlsSettings`. */
  caFile?: string;
  /** PEM client certificate (chain) and its key, for servers that require one (mTLS). */
  certFile?: string;
  keyFile?: string;
}

/** How requests to one origin go out. */
export interface Route {
  /** The dispatcher, when it is ready (direct connections are, at once). */
  dispatcher: PooledDispatcher | undefined;
  /** Resolves to the dispatcher once the proxy classes are loaded (proxied routes, first use). */
  ready: Promise<PooledDispatcher> | undefined;
  /** ` (via proxy …)`, password redacted, appended to network errors; '' when direct. */
  via: string;
}

export interface Connections {
  route(origin: string): Route;
  close(): Promise<void>;
}

/** The proxy settings read from the environment: lowercase first, as curl and undici do. */
interface EnvProxies {
  http?: { name: string; url: string };
  https?: { name: string; url: string };
  noProxy: string;
}

export function createConnections(opts: ConnectionOptions): Connections {
  const secureContext = tlsSettings(opts);
  const tls = secureContext ? { secureContext } : undefined;
  const explicit = opts.proxy !== undefined ? proxySettings(opts.proxy, opts.source) : undefined;
  // Read once: a client's routes do not change under it when the environment does.
  const env = explicit ? undefined : envProxies(opts.source);
  const dispatcherOptions = {
    connections: opts.connections,
    keepAliveTimeout: 30_000,
    // Backstops; the per-request AbortSignal deadline is what normally fires.
    headersTimeout: opts.timeoutMs,
    bodyTimeout: opts.timeoutMs,
  };
  const pools: Pool[] = [];
  let agent: Promise<Dispatcher> | undefined;
  let closed = false;

  /** One proxy dispatcher for all of the client's origins, created on first use. */
  function proxyAgent(): Promise<Dispatcher> {
    agent ??= loadProxyClasses().then(({ ProxyAgent, EnvHttpProxyAgent, proxyClient }) => {
      if (closed) throw new FeedsyncError(`upstream client of source ${opts.source} is closed`, false);
      if (explicit) {
        // The credentials go in `token`, so undici never holds the URL with the password.
        return new ProxyAgent({
          ...dispatcherOptions,
          clientFactory: proxyClient,
          uri: explicit.uri,
          ...(explicit.token !== undefined && { token: explicit.token }),
          ...(tls && { requestTls: tls }),
        });
      }
      return new EnvHttpProxyAgent({
        ...dispatcherOptions,
        clientFactory: proxyClient,
        // The values read at creation, so a later change of the environment cannot split the
        // client's view: routes were chosen with these.
        httpProxy: env?.http?.url ?? '',
        httpsProxy: env?.https?.url ?? '',
        noProxy: env?.noProxy ?? '',
        // `connect` serves the hosts NO_PROXY exempts, `requestTls` the tunnels through the proxy.
        ...(tls && { connect: tls, requestTls: tls }),
      });
    });
    return agent;
  }

  return {
    route(origin) {
      const https = origin.startsWith('https:');
      const viaEnv = env && (https ? (env.https ?? env.http) : env.http);
      if (explicit || viaEnv) {
        const unless = env?.noProxy ? ' unless NO_PROXY exempts the host' : '';
        const via = explicit
          ? ` (via proxy ${explicit.display})`
          : ` (via proxy ${redactUrlPassword(viaEnv!.url)} from ${viaEnv!.name}${unless})`;
        const route: Route = { dispatcher: undefined, ready: undefined, via };
        route.ready = proxyAgent().then((a) => (route.dispatcher = new Routed(a, origin).asPooled()));
        // A failure reaches the requests awaiting `ready`; this only keeps it from being unhandled.
        route.ready.catch(() => undefined);
        return route;
      }
      const connect = https && tls ? tls : undefined;
      const pool = new Pool(origin, { ...dispatcherOptions, ...(connect && { connect }) });
      pools.push(pool);
      // transport.ts retries a request that an idle keep-alive socket failed on a one-off client:
      // it must have these TLS settings (a default one could even succeed by trusting the CAs the
      // source's ca_file replaces). Proxied routes report no idle socket, so never take that path.
      const dispatcher: PooledDispatcher = connect
        ? Object.assign(pool, { fresh: () => new Client(origin, { pipelining: 0, connect }) })
        : pool;
      return { dispatcher, ready: undefined, via: '' };
    },
    async close() {
      closed = true;
      const closing: Promise<unknown>[] = pools.splice(0).map((p) => p.close());
      if (agent)
        closing.push(
          agent.then(
            (a) => a.close(),
            () => undefined,
          ),
        );
      // Every dispatcher is closed even when one fails; the first failure is reported afterwards.
      const results = await Promise.allSettled(closing);
      const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed) throw failed.reason;
    },
  };
}

/**
 * A dispatcher shown to transport.ts's `send` as a pool with no idle socket (see `route`). For an
 * agent (proxies) it also names the origin each request goes to, which a Pool knows by itself.
 */
class Routed {
  readonly stats = { free: 0 };
  constructor(
    private readonly target: Dispatcher,
    private readonly origin: string | undefined,
  ) {}

  dispatch(options: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    return this.target.dispatch(this.origin ? { ...options, origin: this.origin } : options, handler);
  }

  /** `send` (through dispatch.ts) calls only `dispatch` and reads only `stats.free`. */
  asPooled(): PooledDispatcher {
    return this as unknown as PooledDispatcher;
  }
}

/**
 * The source's TLS settings for its upstream connections, read and checked once. `ca_file`
 * REPLACES the default trust store for this source (as curl's --cacert does): only the CAs in the
 * bundle are trusted, neither Node's built-in list nor NODE_EXTRA_CA_CERTS. It applies to the
 * upstream servers, direct or through a proxy's CONNECT tunnel, not to an https:// proxy itself.
 */
function tlsSettings(opts: ConnectionOptions): SecureContext | undefined {
  if (opts.caFile === undefined && opts.certFile === undefined && opts.keyFile === undefined)
    return undefined;
  if ((opts.certFile === undefined) !== (opts.keyFile === undefined)) {
    const missing = opts.certFile === undefined ? 'cert_file' : 'key_file';
    throw new ConfigError(`${missing} of source ${opts.source}`, 'cert_file and key_file go together');
  }
  const ca = opts.caFile !== undefined ? readPem('ca_file', opts.caFile, opts.source) : undefined;
  const cert = opts.certFile !== undefined ? readPem('cert_file', opts.certFile, opts.source) : undefined;
  const key = opts.keyFile !== undefined ? readPem('key_file', opts.keyFile, opts.source) : undefined;
  // OpenSSL accepts a CA "bundle" without a single certificate in it (trusting nothing at all).
  if (ca !== undefined && !ca.includes('-----BEGIN CERTIFICATE-----')) {
    throw new ConfigError(`ca_file of source ${opts.source}`, `${opts.caFile} holds no PEM certificate`);
  }
  try {
    if (ca !== undefined) createSecureContext({ ca });
  } catch (err) {
    throw new ConfigError(
      `ca_file of source ${opts.source}`,
      `${opts.caFile} is not a usable PEM CA bundle (${tlsError(err)})`,
    );
  }
  try {
    return createSecureContext({ ca, cert, key });
  } catch (err) {
    throw new ConfigError(
      `cert_file/key_file of source ${opts.source}`,
      `${opts.certFile} and ${opts.keyFile} are not a usable PEM certificate and key (${tlsError(err)})`,
    );
  }
}

function readPem(key: string, path: string, source: string): string {
  try {
    return readFileSync(path, 'latin1');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    throw new ConfigError(`${key} of source ${source}`, `cannot read ${path} (${code})`);
  }
}

function tlsError(err: unknown): string {
  // OpenSSL messages name the problem, never the key material.
  return err instanceof Error ? err.message : String(err);
}

interface ProxySettings {
  /** The proxy URL without userinfo. */
  uri: string;
  /** `Basic …` from the userinfo, if any. */
  token?: string;
  /** The URL with its password redacted, for messages. */
  display: string;
}

function proxySettings(value: string, source: string): ProxySettings {
  const url = parseProxyUrl(value);
  if (!url) {
    throw new ConfigError(
      `proxy of source ${source}`,
      `${redactUrlPassword(value)} is not an http:// or https:// URL`,
    );
  }
  let token: string | undefined;
  if (url.username !== '' || url.password !== '') {
    const user = decodeUserinfo(url.username);
    const password = decodeUserinfo(url.password);
    token = `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;
  }
  url.username = '';
  url.password = '';
  return { uri: url.href, ...(token !== undefined && { token }), display: redactUrlPassword(value) };
}

function decodeUserinfo(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    // A malformed escape: the raw form is all there is.
    return value;
  }
}

function envProxies(source: string): EnvProxies | undefined {
  const read = (lower: string, upper: string): { name: string; url: string } | undefined => {
    // An empty value counts as unset, as undici (and curl) read it.
    const lowerValue = process.env[lower];
    const name = lowerValue !== undefined ? lower : upper;
    const url = lowerValue ?? process.env[upper];
    if (!url) return undefined;
    if (!parseProxyUrl(url)) {
      throw new ConfigError(
        `${name} (environment, for source ${source})`,
        `${redactUrlPassword(url)} is not an http:// or https:// URL`,
      );
    }
    return { name, url };
  };
  const http = read('http_proxy', 'HTTP_PROXY');
  const https = read('https_proxy', 'HTTPS_PROXY');
  if (!http && !https) return undefined;
  return {
    ...(http && { http }),
    ...(https && { https }),
    noProxy: process.env.no_proxy ?? process.env.NO_PROXY ?? '',
  };
}

function parseProxyUrl(value: string): URL | undefined {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return undefined;
  }
  return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== '' ? url : undefined;
}
