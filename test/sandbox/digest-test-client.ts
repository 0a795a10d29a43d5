// A small, independent HTTP Digest client for the sandbox tests (RFC 7616, qop=auth), written here
// on purpose so the tests do not share code with src/upstream. Exposes the pieces separately so that
// tests can forge stale, replayed or wrong requests.
import { createHash, randomBytes } from 'node:crypto';

export interface Challenge {
  realm: string;
  nonce: string;
  opaque: string;
  algorithm: string;
  qop: string;
  stale: boolean;
}

export function parseChallenge(header: string | null): Challenge {
  if (!header || !/^Digest\s/i.test(header)) throw new Error(`not a Digest challenge: ${header}`);
  const params: Record<string, string> = {};
  const re = /([a-zA-Z0-9_-]+)\s*=\s*("((?:[^"\\]|\\.)*)"|[^,\s]*)/g;
  for (let m = re.exec(header); m; m = re.exec(header)) {
    params[(m[1] as string).toLowerCase()] = m[3] !== undefined ? m[3] : (m[2] as string);
  }
  return {
    realm: params.realm ?? '',
    nonce: params.nonce ?? '',
    opaque: params.opaque ?? '',
    algorithm: params.algorithm ?? 'MD5',
    qop: params.qop ?? '',
    stale: (params.stale ?? '').toLowerCase() === 'true',
  };
}

export interface AuthInput {
  username: string;
  password: string;
  method: string;
  uri: string;
  nc: number;
  cnonce?: string;
}

export function authorizationHeader(ch: Challenge, a: AuthInput): string {
  const hashName = ch.algorithm.toUpperCase().startsWith('SHA-256') ? 'sha256' : 'md5';
  const h = (s: string) => createHash(hashName).update(s).digest('hex');
  const cnonce = a.cnonce ?? randomBytes(8).toString('hex');
  const nc = a.nc.toString(16).padStart(8, '0');
  let ha1 = h(`${a.username}:${ch.realm}:${a.password}`);
  if (ch.algorithm.toLowerCase().endsWith('-sess')) ha1 = h(`${ha1}:${ch.nonce}:${cnonce}`);
  const ha2 = h(`${a.method}:${a.uri}`);
  const response = h(`${ha1}:${ch.nonce}:${nc}:${cnonce}:auth:${ha2}`);
  return (
    `Digest username="${a.username}", realm="${ch.realm}", nonce="${ch.nonce}", uri="${a.uri}", ` +
    `algorithm=${ch.algorithm}, response="${response}", opaque="${ch.opaque}", qop=auth, nc=${nc}, cnonce="${cnonce}"`
  );
}

export interface GetOptions {
  accept?: string;
  timeoutMs?: number;
}

/** Reuses the last challenge's nonce with increasing nc; answers one 401 with a fresh digest. */
export class DigestTestClient {
  challenge: Challenge | undefined;
  private nc = 0;
  /** 401 responses this client received. */
  unauthorized = 0;

  constructor(
    readonly username: string,
    readonly password: string,
  ) {}

  async get(url: string, opts: GetOptions = {}): Promise<Response> {
    const first = await this.send(url, opts);
    if (first.status !== 401) return first;
    await first.arrayBuffer();
    this.unauthorized++;
    this.challenge = parseChallenge(first.headers.get('www-authenticate'));
    this.nc = 0;
    const second = await this.send(url, opts);
    if (second.status === 401) this.unauthorized++;
    return second;
  }

  async getJson(url: string): Promise<any> {
    const res = await this.get(url, { accept: 'application/json' });
    if (res.status !== 200) throw new Error(`GET ${url}: HTTP ${res.status}`);
    return res.json();
  }

  async getText(url: string, accept = 'application/xml'): Promise<string> {
    const res = await this.get(url, { accept });
    if (res.status !== 200) throw new Error(`GET ${url}: HTTP ${res.status}`);
    return res.text();
  }

  private send(url: string, opts: GetOptions): Promise<Response> {
    const headers: Record<string, string> = {};
    if (opts.accept) headers.accept = opts.accept;
    if (this.challenge) {
      const u = new URL(url);
      headers.authorization = authorizationHeader(this.challenge, {
        username: this.username,
        password: this.password,
        method: 'GET',
        uri: u.pathname + u.search,
        nc: ++this.nc,
      });
    }
    return fetch(url, { headers, signal: AbortSignal.timeout(opts.timeoutMs ?? 10_000) });
  }
}
