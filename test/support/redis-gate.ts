// A TCP proxy in front of a loopback Redis, for faults that need some connections of a process
// to go while others stay: it can stop forwarding (both ways) without closing anything, refuse
// new connections while keeping the open ones, and say which connections Redis sees through it.
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';

export interface RedisGate {
  /** redis:// URL of the proxy. */
  url: string;
  /** Stop forwarding both ways; nothing is closed, what arrives is held. */
  hang(): void;
  /** Forward again, held data first. */
  resume(): void;
  /** Close every new connection at once; the open ones stay. */
  refuse(): void;
  /** Whether Redis sees `addr` (host:port, as CLIENT LIST prints it) as a connection made through this gate. */
  through(addr: string): boolean;
  close(): Promise<void>;
}

export async function redisGate(redisPort: number): Promise<RedisGate> {
  let hung = false;
  let refusing = false;
  const held: (() => void)[] = [];
  const upstreamPorts = new Set<number>();
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    if (refusing) {
      client.destroy();
      return;
    }
    const upstream = connect(redisPort, '127.0.0.1', () => upstreamPorts.add(upstream.localPort!));
    sockets.add(client).add(upstream);
    const pipe = (from: Socket, to: Socket) =>
      from.on('data', (chunk: Buffer) => (hung ? held.push(() => to.write(chunk)) : to.write(chunk)));
    pipe(client, upstream);
    pipe(upstream, client);
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('close', end).on('error', end);
    upstream.on('close', end).on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `redis://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hang: () => (hung = true),
    resume: () => {
      hung = false;
      for (const f of held.splice(0)) f();
    },
    refuse: () => (refusing = true),
    through: (addr) => upstreamPorts.has(Number(addr.split(':').at(-1))),
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
