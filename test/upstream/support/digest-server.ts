// A real HTTP server on 127.0.0.1 that enforces Digest auth (RFC 7616) on every request and
// serves scripted replies, so client tests exercise the real wire protocol. Its verification is
// written independently of src/upstream/digest.ts so it can catch mistakes there.
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export type ServerAlgorithm = 'MD5' | 'MD5-sess' | 'SHA-256' | 'SHA-256-sess';

export type Reply =
  | { status: number; headers?: Record<string, string>; body?: string; delayMs?: number }
  /** Destroy the socket without answering. */
  | { action: 'reset' }
  /** Never answer (until the server closes). */
  | { action: 'hang' }
  /** Announce `body.length * 2` bytes, send `body`, then close the socket. */
  | { action: 'truncate'; body: string; contentType: string };

export interface DigestServerOptions {
  username: string;
  password: string;
  algorithm?: ServerAlgorithm;
  realm?: string;
  /** Offer qop (default true, as `qopOffer`); false = RFC 2069 mode. */
  qop?: boolean;
  /** The qop value offered when `qop` is true (default "auth,auth-int"). */
  qopOffer?: string;
  /** Offer one challenge per algorithm, strongest last (default: just `algorithm`). */
  algorithms?: ServerAlgorithm[];
  /** Several challenges as several WWW-Authenticate headers (default) or listed in one. */
  challengeLayout?: 'headers' | 'one-header';
  /** Challenges sent before ours, for schemes or algorithms a client may not support. */
  extraChallenges?: string[];
  /** Send no `algorithm` param (RFC 7616: it then means MD5). */
  omitAlgorithm?: boolean;
  /** A nonce answers this many requests; the next gets 401 stale=true. */
  nonceMaxUses?: number;
  domain?: string;
  /** Nonces older than this get 401 stale=true. */
  nonceTtlMs?: number;
  /** Send Authentication-Info: nextnonce=... on every success. */
  rotateNonce?: boolean;
  opaque?: string;
  /** Hand out this same nonce in every challenge (servers with time-based nonces do). */
  staticNonce?: string;
  /** Send this WWW-Authenticate instead of a Digest challenge (e.g. a proxy's Basic). */
  challengeHeader?: string;
}

export interface SeenRequest {
  path: string;
  authorization?: string;
  accept?: string;
  /** Status answered (or 'reset'/'hang'/'truncate'). */
  outcome: string;
  /** The WWW-Authenticate header(s) of a 401. */
  challenge?: string | string[];
}

interface NonceState {
  issuedAt: number;
  seenNc: Set<string>;
  uses: number;
}

export class DigestServer {
  readonly requests: SeenRequest[] = [];
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  private readonly nonces = new Map<string, NonceState>();
  private readonly routes = new Map<string, Reply[]>();
  private readonly opts: Required<
    Omit<DigestServerOptions, 'opaque' | 'challengeHeader' | 'staticNonce' | 'nonceMaxUses' | 'domain'>
  > &
    Pick<DigestServerOptions, 'opaque' | 'challengeHeader' | 'staticNonce' | 'nonceMaxUses' | 'domain'>;
  private port = 0;

  private constructor(opts: DigestServerOptions) {
    this.opts = {
      algorithm: 'MD5',
      realm: 'feedsync-test@127.0.0.1',
      qop: true,
      nonceTtlMs: 60_000,
      rotateNonce: false,
      qopOffer: 'auth,auth-int',
      algorithms: [opts.algorithm ?? 'MD5'],
      challengeLayout: 'headers',
      extraChallenges: [],
      omitAlgorithm: false,
      ...opts,
    };
    this.server = createServer((req, res) => this.handle(req, res));
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
  }

  static async start(opts: DigestServerOptions): Promise<DigestServer> {
    const s = new DigestServer(opts);
    await new Promise<void>((resolve) => s.server.listen(0, '127.0.0.1', resolve));
    s.port = (s.server.address() as AddressInfo).port;
    return s;
  }

  get origin(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  url(path: string): string {
    return `${this.origin}${path}`;
  }

  /** Replies for `path` (path + query), used in order; the last one repeats. */
  route(path: string, ...replies: Reply[]): this {
    this.routes.set(path, replies);
    return this;
  }

  /** Make every nonce issued so far stale. */
  expireNonces(): void {
    for (const state of this.nonces.values()) state.issuedAt = -Infinity;
  }

  count(filter?: (r: SeenRequest) => boolean): number {
    return filter ? this.requests.filter(filter).length : this.requests.length;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const path = req.url ?? '/';
    const seen: SeenRequest = {
      path,
      authorization: req.headers.authorization,
      accept: req.headers.accept,
      outcome: '',
    };
    this.requests.push(seen);
    const verdict = this.verify(req);
    if (verdict !== 'ok') {
      seen.outcome = '401';
      seen.challenge = this.challenge(verdict === 'stale');
      res.writeHead(401, {
        'www-authenticate': seen.challenge,
        'content-type': 'text/plain',
      });
      res.end('authentication required');
      return;
    }
    const queue = this.routes.get(path);
    const reply: Reply = queue?.length
      ? queue.length > 1
        ? queue.shift()!
        : queue[0]!
      : { status: 404, body: 'not found', headers: { 'content-type': 'text/plain' } };
    if ('action' in reply) {
      seen.outcome = reply.action;
      if (reply.action === 'reset') req.socket.destroy();
      else if (reply.action === 'truncate') {
        res.writeHead(200, {
          'content-type': reply.contentType,
          'content-length': String(Buffer.byteLength(reply.body) * 2),
        });
        res.write(reply.body, () => req.socket.destroy());
      }
      return;
    }
    seen.outcome = String(reply.status);
    const headers: Record<string, string> = { ...reply.headers };
    if (this.opts.rotateNonce) headers['authentication-info'] = `nextnonce="${this.newNonce()}"`;
    const answer = (): void => {
      res.writeHead(reply.status, headers);
      res.end(reply.body ?? '');
    };
    if (reply.delayMs) setTimeout(answer, reply.delayMs);
    else answer();
  }

  private newNonce(): string {
    const fixed = this.opts.staticNonce;
    if (fixed !== undefined && this.nonces.has(fixed)) return fixed;
    const nonce = fixed ?? randomBytes(12).toString('base64');
    this.nonces.set(nonce, { issuedAt: Date.now(), seenNc: new Set(), uses: 0 });
    return nonce;
  }

  private challenge(stale: boolean): string | string[] {
    if (this.opts.challengeHeader !== undefined) return this.opts.challengeHeader;
    // One nonce for all the challenges of one 401, whichever algorithm the client picks.
    const nonce = this.newNonce();
    const challenges = this.opts.algorithms.map((algorithm) => {
      const parts = [
        `realm="${this.opts.realm}"`,
        this.opts.domain !== undefined ? `domain="${this.opts.domain}"` : undefined,
        this.opts.qop ? `qop="${this.opts.qopOffer}"` : undefined,
        this.opts.omitAlgorithm ? undefined : `algorithm=${algorithm}`,
        `nonce="${nonce}"`,
        this.opts.opaque !== undefined ? `opaque="${this.opts.opaque.replace(/["\\]/g, '\\$&')}"` : undefined,
        stale ? 'stale=true' : undefined,
      ];
      return `Digest ${parts.filter(Boolean).join(', ')}`;
    });
    const all = [...this.opts.extraChallenges, ...challenges];
    if (all.length === 1) return all[0]!;
    return this.opts.challengeLayout === 'headers' ? all : all.join(', ');
  }

  private verify(req: IncomingMessage): 'ok' | 'missing' | 'stale' | 'bad' {
    const header = req.headers.authorization;
    if (!header) return 'missing';
    if (!header.startsWith('Digest ')) return 'bad';
    const p: Record<string, string> = {};
    for (const m of header.slice(7).matchAll(/(\w+)=(?:"((?:[^"\\]|\\.)*)"|([^,\s]+))/g)) {
      p[m[1]!] = m[2] !== undefined ? m[2].replace(/\\(.)/g, '$1') : m[3]!;
    }
    const state = p.nonce !== undefined ? this.nonces.get(p.nonce) : undefined;
    if (!state) return 'bad';
    if (p.uri !== req.url || p.username !== this.opts.username || p.realm !== this.opts.realm) return 'bad';
    // An absent algorithm means MD5 (RFC 7616 §3.3); echoing one we did not send is wrong.
    if (this.opts.omitAlgorithm && p.algorithm !== undefined) return 'bad';
    const algorithm = (p.algorithm ?? 'MD5') as ServerAlgorithm;
    if (!this.opts.algorithms.includes(algorithm)) return 'bad';
    if (this.opts.opaque !== undefined && p.opaque !== this.opts.opaque) return 'bad';
    const algo = algorithm.startsWith('SHA-256') ? 'sha256' : 'md5';
    const H = (s: string): string => createHash(algo).update(s).digest('hex');
    let ha1 = H(`${this.opts.username}:${this.opts.realm}:${this.opts.password}`);
    if (algorithm.endsWith('-sess')) ha1 = H(`${ha1}:${p.nonce}:${p.cnonce}`);
    const ha2 = H(`GET:${p.uri}`);
    let expected: string;
    if (this.opts.qop) {
      if (p.qop !== 'auth' || !p.nc || !p.cnonce) return 'bad';
      // A repeated nc on one nonce is a replay; concurrent requests must each get their own.
      if (state.seenNc.has(p.nc)) return 'bad';
      state.seenNc.add(p.nc);
      expected = H(`${ha1}:${p.nonce}:${p.nc}:${p.cnonce}:auth:${ha2}`);
    } else {
      expected = H(`${ha1}:${p.nonce}:${ha2}`);
    }
    if (p.response !== expected) return 'bad';
    // Stale only once the credentials are otherwise right (RFC 7616 §3.3).
    if (Date.now() - state.issuedAt > this.opts.nonceTtlMs) return 'stale';
    if (this.opts.nonceMaxUses !== undefined && state.uses >= this.opts.nonceMaxUses) return 'stale';
    state.uses += 1;
    return 'ok';
  }
}
