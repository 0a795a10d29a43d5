// Closes keep-alive connections that stay idle longer than the dialect says, while Node's own
// keep-alive timeout (and the Keep-Alive header it sends) stays long: the client believes the
// connection is still good, so its next request on it fails at once, as behind many proxies.
import type { Server } from 'node:http';
import type { Socket } from 'node:net';

/** Node's own idle limit while the dialect's is in force; the Keep-Alive header advertises it. */
const ADVERTISED_KEEP_ALIVE_MS = 65_000;
/** Node's default, back in force when the dialect's limit is 0. */
const NODE_KEEP_ALIVE_MS = 5_000;

export function closeIdleConnections(server: Server, idleMs: () => number): void {
  const timers = new Map<Socket, NodeJS.Timeout>();
  const disarm = (socket: Socket) => {
    clearTimeout(timers.get(socket));
    timers.delete(socket);
  };
  server.on('connection', (socket: Socket) => {
    server.keepAliveTimeout = idleMs() > 0 ? ADVERTISED_KEEP_ALIVE_MS : NODE_KEEP_ALIVE_MS;
    socket.once('close', () => disarm(socket));
  });
  server.on('request', (req, res) => {
    disarm(req.socket);
    res.once('finish', () => {
      const ms = idleMs();
      if (ms <= 0 || req.socket.destroyed) return;
      const timer = setTimeout(() => {
        timers.delete(req.socket);
        req.socket.destroy();
      }, ms);
      timer.unref();
      timers.set(req.socket, timer);
    });
  });
}
