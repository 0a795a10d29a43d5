// Type stubs for the two undici modules src/upstream/undici-dispatchers.ts imports directly.
declare module 'undici/lib/dispatcher/client.js' {
  const Client: unknown;
  export default Client;
}
declare module 'undici/lib/dispatcher/pool.js' {
  const Pool: unknown;
  export default Pool;
}
