// Listening and closing for feedsync's own HTTP servers (operations, admin): one way, so both
// report a port taken the same way and both close without waiting on idle keep-alive sockets.
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Listening {
  port: number;
  /** Idempotent. */
  close(): Promise<void>;
}

/** Listens on host:port (0: any free port); rejects when it cannot (the port taken). */
export async function listen(server: Server, host: string, port: number): Promise<Listening> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  let closing: Promise<void> | undefined;
  return {
    port: (server.address() as AddressInfo).port,
    close() {
      closing ??= new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        // Keep-alive connections from a scraper or a browser would otherwise hold close() open
        // until they time out.
        server.closeAllConnections();
      });
      return closing;
    },
  };
}
