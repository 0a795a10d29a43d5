// A TCP proxy in front of Redis for one feedsync process: the fault suite cuts its connections
// mid-command (every socket destroyed at once, whatever was on the wire) or freezes them (nothing
// forwarded either way, sockets kept open: a network partition the client cannot see), then
// thaws them. New connections made while frozen are accepted and held the same way.
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';

export interface FaultProxy {
  /** redis://127.0.0.1:PORT */
  url: string;
  port: number;
  /** Destroys every connection now; returns how many client connections there were. */
  cut(): number;
  /** Stops forwarding in both directions (bytes wait in the kernel buffers) until thaw(). */
  freeze(): void;
  thaw(): void;
  readonly frozen: boolean;
  close(): Promise<void>;
}

interface Pair {
  client: Socket;
  upstream: Socket;
  /** Chunks read while frozen, per direction, forwarded on thaw. */
  held: { toUpstream: Buffer[]; toClient: Buffer[] };
}

export async function startFaultProxy(targetPort: number, host = '127.0.0.1'): Promise<FaultProxy> {
  const pairs = new Set<Pair>();
  let frozen = false;
  const server = createServer((client) => {
    const upstream = connect(targetPort, host);
    const pair: Pair = { client, upstream, held: { toUpstream: [], toClient: [] } };
    pairs.add(pair);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    // Explicit forwarding (no pipe(): its drain handling could resume a socket we paused).
    client.on('data', (chunk: Buffer) => {
      if (frozen) {
        pair.held.toUpstream.push(chunk);
        client.pause();
      } else upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (frozen) {
        pair.held.toClient.push(chunk);
        upstream.pause();
      } else client.write(chunk);
    });
    if (frozen) {
      client.pause();
      upstream.pause();
    }
    const end = () => {
      client.destroy();
      upstream.destroy();
      pairs.delete(pair);
    };
    client.on('close', end).on('error', end);
    upstream.on('close', end).on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `redis://${host}:${port}`,
    port,
    cut() {
      const n = pairs.size;
      for (const p of [...pairs]) {
        p.client.destroy();
        p.upstream.destroy();
      }
      pairs.clear();
      return n;
    },
    freeze() {
      frozen = true;
      for (const p of pairs) {
        p.client.pause();
        p.upstream.pause();
      }
    },
    thaw() {
      frozen = false;
      for (const p of pairs) {
        for (const chunk of p.held.toUpstream.splice(0)) p.upstream.write(chunk);
        for (const chunk of p.held.toClient.splice(0)) p.client.write(chunk);
        p.client.resume();
        p.upstream.resume();
      }
    },
    get frozen() {
      return frozen;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const p of pairs) {
          p.client.destroy();
          p.upstream.destroy();
        }
        pairs.clear();
        server.close(() => resolve());
      }),
  };
}
