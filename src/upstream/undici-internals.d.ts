// Type stubs for the undici modules src/upstream/undici-dispatchers.ts imports directly.
declare module 'undici/lib/dispatcher/client.js' {
  const Client: unknown;
  export default Client;
}
declare module 'undici/lib/dispatcher/pool.js' {
  const Pool: unknown;
  export default Pool;
}
declare module 'undici/lib/dispatcher/proxy-agent.js' {
  const ProxyAgent: unknown;
  export default ProxyAgent;
}
declare module 'undici/lib/dispatcher/env-http-proxy-agent.js' {
  const EnvHttpProxyAgent: unknown;
  export default EnvHttpProxyAgent;
}
declare module 'undici/lib/api/api-connect.js' {
  const connect: unknown;
  export default connect;
}
