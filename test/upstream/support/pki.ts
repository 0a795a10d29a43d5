// A private PKI made for one test run with the openssl CLI: a CA, a server certificate for
// 127.0.0.1/localhost and a client certificate signed by it, plus an unrelated CA; and an https
// front (node:tls) that terminates TLS, optionally requiring a client certificate, and hands the
// plain HTTP to a test server on loopback (a DigestServer, so Digest auth is checked as usual).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type TLSSocket } from 'node:tls';

export interface Pki {
  dir: string;
  /** PEM file paths. */
  caFile: string;
  serverCertFile: string;
  serverKeyFile: string;
  clientCertFile: string;
  clientKeyFile: string;
  /** A CA that signed nothing here. */
  otherCaFile: string;
  cleanup(): void;
}

function openssl(dir: string, ...args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
}

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

/** Generates the PKI in a new temporary directory (a few hundred ms with EC keys). */
export function createPki(): Pki {
  const dir = mkdtempSync(join(tmpdir(), 'feedsync-pki-'));
  const ca = (name: string): void =>
    openssl(
      dir,
      'req',
      '-x509',
      ...EC,
      '-keyout',
      `${name}.key`,
      '-out',
      `${name}.pem`,
      '-days',
      '2',
      '-subj',
      `/CN=${name}`,
    );
  const leaf = (name: string, extensions: string): void => {
    writeFileSync(join(dir, `${name}.ext`), extensions);
    openssl(dir, 'req', ...EC, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`);
    openssl(
      dir,
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      'ca.pem',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-out',
      `${name}.pem`,
      '-days',
      '2',
      '-extfile',
      `${name}.ext`,
    );
  };
  ca('ca');
  ca('other-ca');
  leaf('server', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
  leaf('client', 'extendedKeyUsage=clientAuth\n');
  return {
    dir,
    caFile: join(dir, 'ca.pem'),
    serverCertFile: join(dir, 'server.pem'),
    serverKeyFile: join(dir, 'server.key'),
    clientCertFile: join(dir, 'client.pem'),
    clientKeyFile: join(dir, 'client.key'),
    otherCaFile: join(dir, 'other-ca.pem'),
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}

export interface TlsFront {
  /** https://127.0.0.1:<port> */
  origin: string;
  port: number;
  /** TLS handshakes completed, and the subject CN of each client certificate presented. */
  handshakes: number;
  clientCerts: string[];
  close(): Promise<void>;
}

/** An https endpoint forwarding each TLS connection to `backendPort` (plain HTTP on 127.0.0.1). */
export async function startTlsFront(
  pki: Pki,
  backendPort: number,
  opts: { requireClientCert?: boolean } = {},
): Promise<TlsFront> {
  const sockets = new Set<Socket>();
  const front: TlsFront = {
    origin: '',
    port: 0,
    handshakes: 0,
    clientCerts: [],
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server = createServer(
    {
      cert: readFileSync(pki.serverCertFile),
      key: readFileSync(pki.serverKeyFile),
      ...(opts.requireClientCert && {
        ca: readFileSync(pki.caFile),
        requestCert: true,
        rejectUnauthorized: true,
      }),
    },
    (tls: TLSSocket) => {
      front.handshakes += 1;
      const peer = tls.getPeerCertificate();
      if (peer && peer.subject) front.clientCerts.push(String(peer.subject.CN));
      const backend = connect(backendPort, '127.0.0.1');
      sockets.add(backend);
      backend.on('close', () => sockets.delete(backend));
      tls.pipe(backend).pipe(tls);
      tls.on('error', () => backend.destroy());
      backend.on('error', () => tls.destroy());
      tls.on('close', () => backend.destroy());
      backend.on('close', () => tls.destroy());
    },
  );
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  // Failed handshakes (no client certificate, an untrusted server) are expected in these tests.
  server.on('tlsClientError', () => undefined);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  front.port = (server.address() as AddressInfo).port;
  front.origin = `https://127.0.0.1:${front.port}`;
  return front;
}
