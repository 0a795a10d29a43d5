// A Redis Cluster for tests, as real processes on loopback: `primaries` primaries (default 3), each
// with `replicasPerPrimary` replicas (default 1), every node a `redis-server --cluster-enabled yes`
// on its own free port (and its own free cluster-bus port) with its own dir under one temp dir.
// The cluster is formed without redis-cli (CLUSTER MEET, ADDSLOTSRANGE, REPLICATE over ioredis
// standalone connections), so only redis-server (7.0 or later) is needed. It can move a hash slot
// while clients use it (online resharding) and kill a primary to make its replica take over.
// With `tls` every node speaks TLS only, on its client port, its cluster bus and its replication
// link, and the harness talks to the nodes over TLS as well.
//
// Settings chosen, beside the brief's ones:
// - `--cluster-port`: the bus port is otherwise port + 10000, which for an ephemeral port can be
//   above 65535 or taken; it gets its own free port, and CLUSTER MEET names it.
// - `--cluster-replica-validity-factor 0`: a replica refuses to fail over when it last heard from
//   its primary more than node-timeout × factor + repl-ping-replica-period ago (1 s × 10 + 10 s
//   with the defaults). That should not bite right after a SIGKILL, but with a 1 s node timeout a
//   paused test or a slow machine comes close; 0 makes the replica always eligible, so a kill always
//   ends in a failover.
// - `--cluster-require-full-coverage` is left at its default (yes): the whole cluster answers
//   CLUSTERDOWN while the killed primary's slots have no owner, as a production cluster does, and
//   `cluster_state:ok` coming back is what killPrimaryOf waits for.
// - `--repl-diskless-sync-delay 0`: 7.0 syncs replicas diskless by default and waits 5 s for more
//   replicas to join the same transfer; nobody else is coming, so start at once.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, truncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ConnectionOptions } from 'node:tls';
import { Redis } from 'ioredis';
import { freePort } from './redis.js';

export interface ClusterNode {
  port: number;
  id: string;
  role: 'master' | 'replica';
}

export interface RedisClusterSet {
  /**
   * redis+cluster://[:password@]127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3 (the initial primaries as
   * seeds); rediss+cluster://… with `tls` (the ports are then the TLS ports, the only ones).
   */
  url: string;
  /** All node ports (primaries first, then replicas), including nodes killed since. */
  ports: number[];
  /** Current roles of the live nodes (from CLUSTER NODES of any live node; failed nodes left out). */
  nodes(): Promise<ClusterNode[]>;
  /** Port of the primary that owns the hash slot of `key` now. */
  ownerOf(key: string): Promise<number>;
  /** Ports of the live replicas of the primary that owns `key`'s slot now. */
  replicasOf(key: string): Promise<number[]>;
  /** Send `signal` to the node on `port` (SIGSTOP / SIGCONT to freeze and thaw it). */
  signal(port: number, signal: NodeJS.Signals): void;
  /**
   * Move the hash slot of `key` (all its keys, with MIGRATE … KEYS in batches, CLUSTER SETSLOT
   * IMPORTING/MIGRATING/NODE on both and then on all primaries) to the primary on `toPort`, while
   * clients keep using it (online resharding, as redis-cli --cluster reshard does). Resolves once
   * every live node names the new owner.
   */
  migrateSlotOf(
    key: string,
    toPort: number,
  ): Promise<{ slot: number; from: number; to: number; keys: number }>;
  /**
   * SIGKILL the primary owning `key`'s slot; resolves with the port of its replica once that has
   * been promoted (cluster_state ok again on every live node, and each shows the replica as master).
   */
  killPrimaryOf(key: string): Promise<{ killed: number; promoted: number; failoverMs: number }>;
  /**
   * SIGKILL the primary owning `key`'s slot and start it again on the same port from its own files
   * (its AOF, its nodes.conf): a crash and restart in place. `loseLastBytes` cuts that much off the
   * end of its AOF first: what a host crash does to writes not yet fsynced (kill -9 alone loses
   * nothing, the kernel still has them); Redis loads the cut AOF (aof-load-truncated). Resolves
   * once every live node sees it own the slot again, with how long it was down.
   */
  restartPrimaryOf(
    key: string,
    opts?: { loseLastBytes?: number; loseSince?: AofMark },
  ): Promise<{ port: number; downMs: number; lostBytes: number }>;
  /**
   * Where the AOF of the primary owning `key`'s slot ends now: `restartPrimaryOf(key, { loseSince })`
   * cuts everything written after it, so a write made in between is surely lost, whatever else the
   * node wrote meanwhile.
   */
  aofMark(key: string): Promise<AofMark>;
  stop(): Promise<void>;
}

export interface StartRedisClusterOptions {
  /** requirepass and masterauth on every node; MIGRATE authenticates with it too. */
  password?: string;
  primaries?: number;
  replicasPerPrimary?: number;
  /** cluster-node-timeout: a primary silent this long is PFAIL, then FAIL, then failed over. */
  nodeTimeoutMs?: number;
  /** appendonly yes (appendfsync everysec, the default) or no; default true. */
  appendonly?: boolean;
  /**
   * TLS only: every node listens on its TLS port alone (`--port 0`), and the cluster bus and
   * replication (and MIGRATE, which follows tls-cluster) run over TLS too. The harness's own
   * connections use TLS with the CA, presenting the client identity below.
   */
  tls?: RedisClusterTls;
}

export interface RedisClusterTls {
  /** PEM files: the nodes' server certificate and key, and the CA both sides' certificates chain to. */
  certFile: string;
  keyFile: string;
  caFile: string;
  /** `tls-auth-clients yes`: clients, the nodes' own bus and replication links included, need a certificate. */
  authClients: boolean;
  /**
   * The client identity of the nodes' outgoing links (cluster bus, replication, MIGRATE:
   * `tls-client-cert-file`/`tls-client-key-file`) and of the harness's connections. Default
   * certFile/keyFile, which works only when that certificate may act as a client's: the one
   * createPki() makes has extendedKeyUsage=serverAuth alone, so OpenSSL refuses it as a client
   * certificate ("unsuitable certificate purpose") and, with authClients, no node could MEET
   * another; pass createPki()'s client certificate then.
   */
  clientCertFile?: string;
  clientKeyFile?: string;
}

/** How the harness's own connections reach a node. */
interface Access {
  password?: string;
  tls?: ConnectionOptions;
}

const BIN = '/usr/bin/redis-server';
const TOTAL_SLOTS = 16_384;
/** Keys per MIGRATE in migrateSlotOf (redis-cli's default --cluster-pipeline is 10). */
const MIGRATE_BATCH = 10;
/** Pause between MIGRATE batches so clients' commands interleave with the migration. */
const MIGRATE_TICK_MS = 5;
const POLL_MS = 50;

interface NodeLine {
  id: string;
  port: number;
  flags: string[];
  master: string | undefined;
  slots: Array<[number, number]>;
}

export async function startRedisCluster(opts: StartRedisClusterOptions = {}): Promise<RedisClusterSet> {
  const pw = opts.password || undefined;
  const primaries = opts.primaries ?? 3;
  const replicasPerPrimary = opts.replicasPerPrimary ?? 1;
  const nodeTimeoutMs = opts.nodeTimeoutMs ?? 1_000;
  const appendonly = opts.appendonly ?? true;
  const tls = opts.tls;
  const clientCert = tls && (tls.clientCertFile ?? tls.certFile);
  const clientKey = tls && (tls.clientKeyFile ?? tls.keyFile);
  const access: Access = {
    ...(pw && { password: pw }),
    // No servername: the nodes are reached as 127.0.0.1, which the certificate must name (an IP
    // SAN; Node checks it without SNI).
    ...(tls && {
      tls: { ca: readFileSync(tls.caFile), cert: readFileSync(clientCert!), key: readFileSync(clientKey!) },
    }),
  };
  if (primaries < 1 || replicasPerPrimary < 0) throw new Error('startRedisCluster: bad node counts');
  const dir = mkdtempSync(join(tmpdir(), 'feedsync-cluster-'));
  const children = new Map<number, ChildProcess>();
  const alive = (): number[] => [...children.keys()];

  const busPorts = new Map<number, number>();
  /** A new node on fresh ports, or (`again`) the node that was on that port, from its own files. */
  const launch = async (again?: number): Promise<number> => {
    // Another process can take a probed port before redis-server binds it: try fresh ports again.
    for (let attempt = 1; ; attempt++) {
      const port = again ?? (await freePort());
      const busPort = again ? busPorts.get(again)! : await freePort();
      const sub = join(dir, String(port));
      if (!again) {
        rmSync(sub, { recursive: true, force: true });
        mkdirSync(sub);
      }
      const args = [
        ...(tls
          ? [
              '--port',
              '0',
              '--tls-port',
              String(port),
              '--tls-cluster',
              'yes',
              '--tls-replication',
              'yes',
              '--tls-cert-file',
              tls.certFile,
              '--tls-key-file',
              tls.keyFile,
              '--tls-client-cert-file',
              clientCert!,
              '--tls-client-key-file',
              clientKey!,
              '--tls-ca-cert-file',
              tls.caFile,
              '--tls-auth-clients',
              tls.authClients ? 'yes' : 'no',
            ]
          : ['--port', String(port)]),
        '--bind',
        '127.0.0.1',
        '--cluster-enabled',
        'yes',
        '--cluster-port',
        String(busPort),
        '--cluster-config-file',
        `nodes-${port}.conf`,
        '--cluster-node-timeout',
        String(nodeTimeoutMs),
        '--cluster-replica-validity-factor',
        '0',
        '--repl-diskless-sync-delay',
        '0',
        '--dir',
        sub,
        '--appendonly',
        appendonly ? 'yes' : 'no',
        '--save',
        '',
        '--daemonize',
        'no',
        '--loglevel',
        'warning',
        ...(pw ? ['--requirepass', pw, '--masterauth', pw] : []),
      ];
      const child = spawn(BIN, args, { cwd: sub, stdio: ['ignore', 'pipe', 'pipe'] });
      let output = '';
      const collect = (chunk: Buffer): void => {
        if (output.length < 4000) output += chunk.toString('utf8');
      };
      child.stdout?.on('data', collect);
      child.stderr?.on('data', collect);
      const onExit = (): void => void child.kill('SIGKILL');
      process.once('exit', onExit);
      let exited = false;
      child.once('exit', () => {
        exited = true;
        process.removeListener('exit', onExit);
      });
      child.once('error', () => undefined);
      try {
        await waitPing(port, access, () => exited);
        children.set(port, child);
        busPorts.set(port, busPort);
        return port;
      } catch (err) {
        child.kill('SIGKILL');
        if (attempt >= 5 || again) {
          const text = pw ? output.split(pw).join('***') : output;
          throw new Error(
            `redis-server (cluster node) did not start: ${(err as Error).message}; ${text.trim()}`,
            {
              cause: err,
            },
          );
        }
      }
    }
  };

  const set = await (async (): Promise<RedisClusterSet> => {
    const count = primaries * (1 + replicasPerPrimary);
    const ports: number[] = [];
    for (let i = 0; i < count; i++) ports.push(await launch());
    const primaryPorts = ports.slice(0, primaries);
    const ids = new Map<number, string>();
    for (const port of ports) {
      await withNode(port, access, async (c) => {
        ids.set(port, (await c.call('CLUSTER', 'MYID')) as string);
      });
    }
    // Slots and distinct config epochs before the nodes meet, as redis-cli does (no epoch collisions
    // to resolve afterwards).
    for (const [i, port] of primaryPorts.entries()) {
      const from = Math.floor((i * TOTAL_SLOTS) / primaries);
      const to = Math.floor(((i + 1) * TOTAL_SLOTS) / primaries) - 1;
      await withNode(port, access, async (c) => {
        await c.call('CLUSTER', 'ADDSLOTSRANGE', from, to);
        await c.call('CLUSTER', 'SET-CONFIG-EPOCH', i + 1);
      });
    }
    await withNode(ports[0], access, async (c) => {
      for (const port of ports.slice(1))
        await c.call('CLUSTER', 'MEET', '127.0.0.1', port, busPorts.get(port)!);
    });
    const allIds = new Set(ids.values());
    await until('every node knows every other', 20_000, async () => {
      for (const port of ports) {
        const lines = await nodeLines(port, access);
        const known = lines.filter(
          (l) => allIds.has(l.id) && !l.flags.includes('handshake') && !l.flags.includes('noaddr'),
        );
        if (known.length !== count || lines.length !== count) return false;
      }
      return true;
    });
    const masterOf = new Map<number, number>();
    for (let i = 0; i < primaries; i++) {
      for (let r = 0; r < replicasPerPrimary; r++) {
        const replica = ports[primaries + i * replicasPerPrimary + r];
        masterOf.set(replica, primaryPorts[i]);
        await withNode(replica, access, (c) => c.call('CLUSTER', 'REPLICATE', ids.get(primaryPorts[i])!));
      }
    }
    await until('cluster_state ok, replicas attached and known everywhere', 30_000, async () => {
      for (const port of ports) {
        if (!(await clusterOk(port, access))) return false;
        const lines = await nodeLines(port, access);
        for (const [replica, primary] of masterOf) {
          const line = lines.find((l) => l.id === ids.get(replica));
          if (!line?.flags.includes('slave') || line.master !== ids.get(primary)) return false;
        }
      }
      for (const replica of masterOf.keys()) {
        const info = await withNode(replica, access, (c) => c.info('replication'));
        if (!/^master_link_status:up/m.test(info)) return false;
      }
      return true;
    });

    /** CLUSTER NODES of the first live node that answers. */
    const view = async (): Promise<NodeLine[]> => {
      let last: unknown;
      for (const port of alive()) {
        try {
          return await nodeLines(port, access);
        } catch (err) {
          last = err;
        }
      }
      throw new Error(`no cluster node answered: ${String(last)}`);
    };
    const slotOf = async (key: string): Promise<number> => {
      for (const port of alive()) {
        try {
          return (await withNode(port, access, (c) => c.call('CLUSTER', 'KEYSLOT', key))) as number;
        } catch {
          // next node
        }
      }
      throw new Error('no cluster node answered CLUSTER KEYSLOT');
    };
    const ownerLine = (lines: NodeLine[], slot: number): NodeLine => {
      const owner = lines.find(
        (l) =>
          l.flags.includes('master') &&
          !l.flags.includes('fail') &&
          l.slots.some(([a, b]) => slot >= a && slot <= b),
      );
      if (!owner) throw new Error(`no live primary owns slot ${slot}`);
      return owner;
    };
    const ownerOf = async (key: string): Promise<number> => ownerLine(await view(), await slotOf(key)).port;

    return {
      url: `${tls ? 'rediss' : 'redis'}+cluster://${pw ? `:${encodeURIComponent(pw)}@` : ''}${primaryPorts.map((p) => `127.0.0.1:${p}`).join(',')}`,
      ports,
      async nodes() {
        const lines = await view();
        return lines
          .filter((l) => children.has(l.port) && !l.flags.includes('fail') && !l.flags.includes('handshake'))
          .map((l) => ({ port: l.port, id: l.id, role: l.flags.includes('master') ? 'master' : 'replica' }));
      },
      ownerOf,
      async replicasOf(key) {
        const lines = await view();
        const owner = ownerLine(lines, await slotOf(key));
        return lines
          .filter((l) => l.master === owner.id && !l.flags.includes('fail') && children.has(l.port))
          .map((l) => l.port);
      },
      signal(port, signal) {
        const child = children.get(port);
        if (!child) throw new Error(`signal: ${port} is not one of this cluster's live nodes`);
        child.kill(signal);
      },
      async migrateSlotOf(key, toPort) {
        const slot = await slotOf(key);
        const lines = await view();
        const source = ownerLine(lines, slot);
        const target = lines.find((l) => l.port === toPort);
        if (!target || !target.flags.includes('master') || !children.has(toPort)) {
          throw new Error(`migrateSlotOf: ${toPort} is not a live primary`);
        }
        if (source.port === toPort) throw new Error(`migrateSlotOf: slot ${slot} is already on ${toPort}`);
        const src = await connect(source.port, access);
        const dst = await connect(toPort, access);
        let moved = 0;
        try {
          await dst.call('CLUSTER', 'SETSLOT', slot, 'IMPORTING', source.id);
          await src.call('CLUSTER', 'SETSLOT', slot, 'MIGRATING', target.id);
          for (;;) {
            const keys = (await src.call('CLUSTER', 'GETKEYSINSLOT', slot, MIGRATE_BATCH)) as string[];
            if (keys.length === 0) break;
            await src.call(
              'MIGRATE',
              '127.0.0.1',
              toPort,
              '',
              0,
              5_000,
              ...(pw ? ['AUTH', pw] : []),
              'KEYS',
              ...keys,
            );
            moved += keys.length;
            // Let the clients' commands (ASK redirects included) run between batches.
            await sleep(MIGRATE_TICK_MS);
          }
          // Target first (it bumps its config epoch, so its claim wins), then the source (which
          // drops its MIGRATING state), then every other primary (replicas refuse SETSLOT).
          await dst.call('CLUSTER', 'SETSLOT', slot, 'NODE', target.id);
          await src.call('CLUSTER', 'SETSLOT', slot, 'NODE', target.id);
          for (const l of lines) {
            if (l.port === toPort || l.port === source.port) continue;
            if (!l.flags.includes('master') || l.flags.includes('fail') || !children.has(l.port)) continue;
            await withNode(l.port, access, (c) => c.call('CLUSTER', 'SETSLOT', slot, 'NODE', target.id));
          }
        } finally {
          src.disconnect();
          dst.disconnect();
        }
        await until(`every node names ${toPort} as the owner of slot ${slot}`, 20_000, async () => {
          for (const port of alive())
            if ((await slotOwnerBySlots(port, access, slot)) !== toPort) return false;
          return true;
        });
        return { slot, from: source.port, to: toPort, keys: moved };
      },
      async killPrimaryOf(key) {
        const slot = await slotOf(key);
        const lines = await view();
        const owner = ownerLine(lines, slot);
        const replicaIds = new Set(
          lines
            .filter((l) => l.master === owner.id && !l.flags.includes('fail') && children.has(l.port))
            .map((l) => l.id),
        );
        if (replicaIds.size === 0)
          throw new Error(`killPrimaryOf: primary ${owner.port} has no live replica`);
        const child = children.get(owner.port);
        if (!child) throw new Error(`killPrimaryOf: ${owner.port} is not one of this cluster's live nodes`);
        const killedAt = Date.now();
        child.kill('SIGKILL');
        children.delete(owner.port);
        let promoted = 0;
        await until(
          `a replica of ${owner.port} taking over slot ${slot}`,
          Math.max(30_000, nodeTimeoutMs * 20),
          async () => {
            let candidate: number | undefined;
            for (const port of alive()) {
              if (!(await clusterOk(port, access))) return false;
              const l = ownerLine(await nodeLines(port, access), slot);
              if (!replicaIds.has(l.id) || (candidate !== undefined && candidate !== l.port)) return false;
              candidate = l.port;
            }
            promoted = candidate ?? 0;
            return candidate !== undefined;
          },
        );
        return { killed: owner.port, promoted, failoverMs: Date.now() - killedAt };
      },
      async aofMark(key) {
        const owner = ownerLine(await view(), await slotOf(key));
        return { port: owner.port, ...newestAof(join(dir, String(owner.port))) };
      },
      async restartPrimaryOf(key, restartOpts = {}) {
        const slot = await slotOf(key);
        const owner = ownerLine(await view(), slot);
        const child = children.get(owner.port);
        if (!child)
          throw new Error(`restartPrimaryOf: ${owner.port} is not one of this cluster's live nodes`);
        const exited = new Promise((resolve) => child.once('exit', resolve));
        const killedAt = Date.now();
        child.kill('SIGKILL');
        children.delete(owner.port);
        await exited;
        const nodeDir = join(dir, String(owner.port));
        // Since the mark: what the file grew by, or all of a newer file (a rewrite started one).
        const since = restartOpts.loseSince;
        const now = newestAof(nodeDir);
        const sinceBytes = since && now.size - (since.file === now.file ? since.size : 0);
        const lostBytes = loseAofTail(nodeDir, sinceBytes ?? restartOpts.loseLastBytes ?? 0);
        await launch(owner.port);
        await until(`${owner.port} back, owning slot ${slot}`, 30_000, async () => {
          for (const port of alive()) {
            if (!(await clusterOk(port, access))) return false;
            if (ownerLine(await nodeLines(port, access), slot).port !== owner.port) return false;
          }
          return true;
        });
        return { port: owner.port, downMs: Date.now() - killedAt, lostBytes };
      },
      async stop() {
        await stopAll();
      },
    };
  })().catch(async (err) => {
    await stopAll();
    throw err;
  });
  return set;

  async function stopAll(): Promise<void> {
    const exits: Array<Promise<void>> = [];
    for (const [, child] of children) {
      if (child.exitCode !== null || child.signalCode !== null) continue;
      exits.push(
        new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, 2_000);
          child.once('exit', () => {
            clearTimeout(timer);
            resolve();
          });
        }),
      );
      child.kill('SIGKILL');
    }
    children.clear();
    await Promise.all(exits);
    try {
      rmSync(dir, { recursive: true, force: true });
    } catch {
      // best effort: a temp dir left behind is not worth failing a test for
    }
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

async function until(what: string, timeoutMs: number, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      if (await check()) return;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `redis cluster: timed out waiting for ${what}${last ? ` (last error: ${String(last)})` : ''}`,
      );
    }
    await sleep(POLL_MS);
  }
}

/** A standalone admin connection that never retries (a dead node fails the call at once). */
async function connect(port: number, access: Access): Promise<Redis> {
  const client = new Redis({
    port,
    host: '127.0.0.1',
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: 2_000,
    commandTimeout: 10_000,
    ...(access.password && { password: access.password }),
    ...(access.tls && { tls: access.tls }),
  });
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (err) {
    client.disconnect();
    throw err;
  }
  return client;
}

async function withNode<T>(port: number, access: Access, fn: (c: Redis) => Promise<T>): Promise<T> {
  const client = await connect(port, access);
  try {
    return await fn(client);
  } finally {
    client.disconnect();
  }
}

async function clusterOk(port: number, access: Access): Promise<boolean> {
  const info = (await withNode(port, access, (c) => c.call('CLUSTER', 'INFO'))) as string;
  return /^cluster_state:ok/m.test(info);
}

/** CLUSTER NODES: `<id> <ip:port@cport[,hostname]> <flags> <master|-> <ping> <pong> <epoch> <link> <slot>…` */
async function nodeLines(port: number, access: Access): Promise<NodeLine[]> {
  const text = (await withNode(port, access, (c) => c.call('CLUSTER', 'NODES'))) as string;
  return text
    .split('\n')
    .filter((line) => line.trim())
    .map((line) => {
      const [id, addr, flags, master, , , , , ...slots] = line.trim().split(' ');
      const m = /:(\d+)@/.exec(addr);
      return {
        id,
        port: m ? Number(m[1]) : 0,
        flags: flags.split(','),
        master: master === '-' ? undefined : master,
        // Importing/migrating markers ([slot->-id], [slot-<-id]) are not ownership.
        slots: slots
          .filter((s) => !s.startsWith('['))
          .map((s) => {
            const [a, b] = s.split('-').map(Number);
            return [a, b ?? a] as [number, number];
          }),
      };
    });
}

/** The primary port CLUSTER SLOTS on `port` names for `slot` (what cluster clients go by). */
async function slotOwnerBySlots(port: number, access: Access, slot: number): Promise<number> {
  const ranges = (await withNode(port, access, (c) => c.call('CLUSTER', 'SLOTS'))) as Array<
    [number, number, [string, number, ...unknown[]], ...unknown[]]
  >;
  const range = ranges.find(([a, b]) => slot >= a && slot <= b);
  return range ? Number(range[2][1]) : 0;
}

async function waitPing(port: number, access: Access, gone: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (gone()) throw new Error(`redis-server on ${port} exited`);
    try {
      if ((await withNode(port, access, (c) => c.ping())) === 'PONG') return;
    } catch {
      // not yet
    }
    if (Date.now() > deadline) throw new Error(`redis-server on ${port} never answered`);
    await sleep(POLL_MS);
  }
}

/** Where a node's AOF ended at a moment (AofMark): its newest incremental file and its size. */
export interface AofMark {
  port: number;
  file: string;
  size: number;
}

/** The node's newest AOF file (Redis 7: appendonlydir/*.incr.aof) and its size. */
function newestAof(nodeDir: string): { file: string; size: number } {
  const aofDir = join(nodeDir, 'appendonlydir');
  const newest = readdirSync(aofDir)
    .filter((f) => f.endsWith('.incr.aof'))
    .sort((a, b) => Number(/\.(\d+)\.incr\.aof$/.exec(a)?.[1]) - Number(/\.(\d+)\.incr\.aof$/.exec(b)?.[1]))
    .at(-1);
  if (!newest) throw new Error(`no incremental AOF file in ${aofDir}`);
  const file = join(aofDir, newest);
  return { file, size: statSync(file).size };
}

/** Cuts `bytes` off the end of the node's newest AOF file. */
function loseAofTail(nodeDir: string, bytes: number): number {
  if (bytes <= 0) return 0;
  const { file, size } = newestAof(nodeDir);
  const cut = Math.min(size, bytes);
  truncateSync(file, size - cut);
  return cut;
}
