// Raw HTTP for the dialect tests: node:http without any decoding (bytes, headers, framing exactly as
// sent) and a Digest answer written here from RFC 7616 / RFC 2069, independent of src/.
import { createHash, randomBytes } from 'node:crypto';
import { request, type Agent, type IncomingHttpHeaders } from 'node:http';

export interface RawResponse {
  status: number;
  headers: IncomingHttpHeaders;
  /** The WWW-Authenticate values, one per header line. */
  challenges: string[];
  body: Buffer;
}

export function rawGet(
  url: string,
  headers: Record<string, string> = {},
  agent: Agent | false = false,
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = request(url, { headers, agent, timeout: 10_000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const raw = res.rawHeaders;
        const challenges: string[] = [];
        for (let i = 0; i < raw.length; i += 2) {
          if ((raw[i] as string).toLowerCase() === 'www-authenticate') challenges.push(raw[i + 1] as string);
        }
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          challenges,
          body: Buffer.concat(chunks),
        });
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${url} timed out`)));
    req.on('error', reject);
    req.end();
  });
}

/** Every challenge in a WWW-Authenticate value, whether it lists one or several. */
export function splitChallenges(value: string): Record<string, string>[] {
  return value
    .split(/,?\s*(?=Digest\s)/i)
    .filter((part) => /^Digest\s/i.test(part))
    .map((part) => {
      const params: Record<string, string> = {};
      const re = /([a-zA-Z0-9_-]+)\s*=\s*("((?:[^"\\]|\\.)*)"|[^,\s]*)/g;
      const text = part.replace(/^Digest\s+/i, '');
      for (let m = re.exec(text); m; m = re.exec(text)) {
        params[(m[1] as string).toLowerCase()] = m[3] !== undefined ? m[3] : (m[2] as string);
      }
      return params;
    });
}

/** An Authorization header answering one challenge; `qop` absent means RFC 2069. */
export function answer(
  ch: Record<string, string>,
  a: { username: string; password: string; uri: string; nc?: number; qop?: 'auth' | 'auth-int' },
): string {
  const algorithm = ch.algorithm ?? 'MD5';
  const h = (s: string) =>
    createHash(algorithm.toUpperCase().startsWith('SHA-256') ? 'sha256' : 'md5')
      .update(s)
      .digest('hex');
  const cnonce = randomBytes(8).toString('hex');
  const nc = (a.nc ?? 1).toString(16).padStart(8, '0');
  let ha1 = h(`${a.username}:${ch.realm}:${a.password}`);
  if (algorithm.toLowerCase().endsWith('-sess')) ha1 = h(`${ha1}:${ch.nonce}:${cnonce}`);
  const ha2 = a.qop === 'auth-int' ? h(`GET:${a.uri}:${h('')}`) : h(`GET:${a.uri}`);
  const parts = [`username="${a.username}"`, `realm="${ch.realm}"`, `nonce="${ch.nonce}"`, `uri="${a.uri}"`];
  if (ch.algorithm) parts.push(`algorithm=${ch.algorithm}`);
  if (ch.opaque !== undefined) parts.push(`opaque="${ch.opaque}"`);
  if (a.qop) {
    parts.push(`qop=${a.qop}`, `nc=${nc}`, `cnonce="${cnonce}"`);
    parts.push(`response="${h(`${ha1}:${ch.nonce}:${nc}:${cnonce}:${a.qop}:${ha2}`)}"`);
  } else {
    parts.push(`response="${h(`${ha1}:${ch.nonce}:${ha2}`)}"`);
  }
  return `Digest ${parts.join(', ')}`;
}

/** GET with Digest: one unauthenticated try for the challenge, then the answer to `pick` of them. */
export async function digestGet(
  url: string,
  creds: { username: string; password: string },
  headers: Record<string, string> = {},
  pick: (chs: Record<string, string>[]) => Record<string, string> = (chs) => chs[0]!,
): Promise<RawResponse & { challenge: Record<string, string> }> {
  const first = await rawGet(url, headers);
  if (first.status !== 401) throw new Error(`expected a 401 first, got ${first.status}`);
  const challenge = pick(first.challenges.flatMap(splitChallenges));
  const u = new URL(url);
  const qop = challenge.qop === undefined ? undefined : 'auth';
  const auth = answer(challenge, { ...creds, uri: u.pathname + u.search, ...(qop ? { qop } : {}) });
  return { ...(await rawGet(url, { ...headers, authorization: auth })), challenge };
}
