// queue.redis_url in Sentinel form: redis+sentinel://[user:password@]host1:port1,host2:port2/<master>.
// Every connection then asks the sentinels where the primary is (ioredis' own Sentinel support:
// `sentinels` + `name`, role master) and asks again after a failover. The user and password are
// those of the primary and replicas; the sentinels themselves are reached without AUTH.
// Plain parsing, no ioredis: the config schema uses it too.

export const SENTINEL_PROTOCOL = 'redis+sentinel:';
const DEFAULT_SENTINEL_PORT = 26379;

export interface SentinelUrl {
  sentinels: { host: string; port: number }[];
  /** The master name the sentinels monitor. */
  name: string;
  username?: string;
  password?: string;
}

export function isSentinelUrl(url: string): boolean {
  return url.toLowerCase().startsWith(`${SENTINEL_PROTOCOL}//`);
}

/** The parts of a redis+sentinel:// URL; throws an Error (never naming the password) when malformed. */
export function parseSentinelUrl(url: string): SentinelUrl {
  const m = /^redis\+sentinel:\/\/(?:([^@/]*)@)?([^/?#@]+)\/([^/?#]+)\/?$/i.exec(url);
  if (!m) throw new Error('expected redis+sentinel://[user:password@]host:port[,host:port…]/<master name>');
  const [, userinfo, hosts, name] = m;
  const sentinels = hosts!.split(',').map((entry) => {
    const h = /^(?:\[([0-9a-f:.]+)\]|([^:[\]]+))(?::(\d{1,5}))?$/i.exec(entry.trim());
    const port = h?.[3] === undefined ? DEFAULT_SENTINEL_PORT : Number(h[3]);
    if (!h || port < 1 || port > 65535) throw new Error(`bad sentinel address "${entry}" (host:port)`);
    return { host: h[1] ?? h[2]!, port };
  });
  const out: SentinelUrl = { sentinels, name: decode(name!) };
  if (userinfo !== undefined && userinfo !== '') {
    const colon = userinfo.indexOf(':');
    const user = colon < 0 ? userinfo : userinfo.slice(0, colon);
    if (user) out.username = decode(user);
    if (colon >= 0) out.password = decode(userinfo.slice(colon + 1));
  }
  return out;
}

/** The URL without user:password, for logs and messages (malformed: a placeholder). */
export function redactSentinelUrl(url: string): string {
  try {
    const parsed = parseSentinelUrl(url);
    const hosts = parsed.sentinels
      .map((s) => `${s.host.includes(':') ? `[${s.host}]` : s.host}:${s.port}`)
      .join(',');
    return `redis+sentinel://${hosts}/${encodeURIComponent(parsed.name)}`;
  } catch {
    return '<invalid redis+sentinel url>';
  }
}

function decode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}
