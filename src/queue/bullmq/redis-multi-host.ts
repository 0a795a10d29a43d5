// queue.redis_url forms that name several hosts instead of one server:
//   redis+sentinel://[user:password@]host1:port1,host2:port2/<master>[/<db>]   Sentinel: every
//       connection asks the sentinels where the primary is (ioredis' `sentinels` + `name`) and
//       again after a failover. The user and password are the data nodes'; the sentinels are
//       reached without AUTH. <db>: the database number (default 0).
//   redis+cluster://[user:password@]host1:port1,host2:port2             Redis Cluster: seed nodes
//       for ioredis' cluster client, which learns the rest and follows MOVED/ASK and failovers.
// `rediss+…` turns TLS on for the data nodes (and, for Sentinel, for the sentinels), with
// queue.redis_tls as for rediss://. Plain parsing, no ioredis: the config schema uses it too.

export type MultiHostKind = 'sentinel' | 'cluster';

export interface MultiHostUrl {
  kind: MultiHostKind;
  tls: boolean;
  hosts: { host: string; port: number }[];
  /** Sentinel: the master name the sentinels monitor. */
  name?: string;
  /** Sentinel: the database number, when not 0. */
  db?: number;
  username?: string;
  password?: string;
}

const FORM = /^(rediss?)\+(sentinel|cluster):\/\//i;
const DEFAULT_PORT: Record<MultiHostKind, number> = { sentinel: 26379, cluster: 6379 };

export const MULTI_HOST_FORMS =
  'redis+sentinel://[user:password@]host:port[,host:port…]/<master name>[/<db>] or ' +
  'redis+cluster://[user:password@]host:port[,host:port…] (rediss+… for TLS)';

/** Which multi-host form `url` is written in, if any. */
export function multiHostKind(url: string): MultiHostKind | undefined {
  return FORM.exec(url)?.[2]?.toLowerCase() as MultiHostKind | undefined;
}

/** The parts of a multi-host URL; throws an Error (never naming the password) when malformed. */
export function parseMultiHostUrl(url: string): MultiHostUrl {
  const form = FORM.exec(url);
  const kind = form?.[2]?.toLowerCase() as MultiHostKind | undefined;
  const m =
    kind === 'sentinel'
      ? /^[^:]+:\/\/(?:([^@/]*)@)?([^/?#@]+)\/([^/?#]+)(?:\/(\d{1,5}))?\/?$/.exec(url)
      : /^[^:]+:\/\/(?:([^@/]*)@)?([^/?#@]+)\/?$/.exec(url);
  if (!form || !kind || !m)
    throw new Error(
      kind === 'cluster'
        ? 'expected redis+cluster://[user:password@]host:port[,host:port…]'
        : 'expected redis+sentinel://[user:password@]host:port[,host:port…]/<master name>[/<db>]',
    );
  const [, userinfo, hosts, name, db] = m;
  const out: MultiHostUrl = {
    kind,
    tls: form[1]!.toLowerCase() === 'rediss',
    hosts: hosts!.split(',').map((entry) => {
      const h = /^(?:\[([0-9a-f:.]+)\]|([^:[\]]+))(?::(\d{1,5}))?$/i.exec(entry.trim());
      const port = h?.[3] === undefined ? DEFAULT_PORT[kind] : Number(h[3]);
      if (!h || port < 1 || port > 65535) throw new Error(`bad ${kind} address "${entry}" (host:port)`);
      return { host: h[1] ?? h[2]!, port };
    }),
  };
  if (name !== undefined) out.name = decode(name);
  if (db !== undefined && Number(db) !== 0) out.db = Number(db);
  if (userinfo !== undefined && userinfo !== '') {
    const colon = userinfo.indexOf(':');
    const user = colon < 0 ? userinfo : userinfo.slice(0, colon);
    if (user) out.username = decode(user);
    if (colon >= 0) out.password = decode(userinfo.slice(colon + 1));
  }
  return out;
}

/** The URL without user:password, for logs and messages (malformed: a placeholder). */
export function redactMultiHostUrl(url: string): string {
  try {
    const parsed = parseMultiHostUrl(url);
    const hosts = parsed.hosts
      .map((s) => `${s.host.includes(':') ? `[${s.host}]` : s.host}:${s.port}`)
      .join(',');
    const scheme = `${parsed.tls ? 'rediss' : 'redis'}+${parsed.kind}://`;
    const path = parsed.name === undefined ? '' : `/${encodeURIComponent(parsed.name)}`;
    return `${scheme}${hosts}${path}${parsed.db === undefined ? '' : `/${parsed.db}`}`;
  } catch {
    return `<invalid ${multiHostKind(url) ?? 'redis'} url>`;
  }
}

function decode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}
