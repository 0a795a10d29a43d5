// Redis leases, under the rule of rule.ts: a source's poller (queue/bullmq/lease.ts), a sink
// shard's consumer (queue/bullmq/delivery.ts) and an operator command holding a source
// (queue/bullmq/source-hold.ts) each hold a Redis key `<token> <owner>` with an expiry, taken with
// a fencing token that only grows (redis-scripts.ts NEXT_TOKEN). A lease not renewed within
// SELF_EXPIRY of the TTL is given up (lost), not only invalid: its holder stops. Every durable
// write of a holder checks the lease value inside its own script (page-commit.ts, shard-lease.ts,
// source-hold.ts).
//
// How leases spread over processes: each process heartbeats into a sorted set of live members
// (score = expiry, by Redis' clock: hosts with skewed clocks still agree on who is alive). A member
// takes no free lease of a group while it holds its share of it, ceil(group size / live members),
// and when it holds more (a member joined) it lets the excess go at its heartbeat, longest-held
// first, once held at least one heartbeat so that leases do not flap. A dead member drops out of
// the set within one TTL, like its leases, so a survivor's share grows just when those expire.
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { sleep, withDeadline } from '../backoff.js';
import { FeedsyncError, errorMessage } from '../core/errors.js';
import { warnRedisFailure } from '../queue/bullmq/redis-monitor.js';
import { whenReady } from '../queue/bullmq/redis.js';
import { luaScript, runScript } from '../queue/bullmq/scripts.js';
import { ACQUIRE, ownerOf, RELEASE, RENEW } from './redis-scripts.js';
import { heartbeatMs, Holding } from './rule.js';

/** How long close() waits for Redis to take the leases back (see close). */
const CLOSE_WAIT_MS = 1_000;

const HEARTBEAT = luaScript(
  'heartbeat',
  `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[2] ~= '0' then redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1]) end
return redis.call('ZCARD', KEYS[1])`,
);

/** One lease: its key, its token counter (never expires), and the group its share is counted in. */
export interface LeaseSpec {
  name: string;
  key: string;
  tokenKey: string;
  group: string;
}

/** What a holder's writes check: the lease key's value while held, `<token> <owner>`. */
export interface LeaseFence {
  leaseKey: string;
  tokenKey: string;
  value: string;
  token: number;
  /** The lease's TTL: what a write that restores the lease (HELD) gives it. */
  ttlMs: number;
}

export interface HeldRedisLease {
  readonly fence: LeaseFence;
  /** Aborted (reason: the error) once the lease is lost, handed over or released. */
  readonly lost: AbortSignal;
  /** Whether the holder may still act (rule.ts). */
  valid(): boolean;
  /**
   * Handed over to another member, and kept renewed until released (rule.ts handOver): the holder
   * may wait for what it has in flight, however long, before it releases.
   */
  handedOver(): boolean;
  release(): Promise<void>;
}

export interface RedisLeasesOptions {
  client: Redis;
  /** The sorted set of live members sharing these leases; none: a one-off holder (an operator command) that takes what is free and shares nothing. */
  membersKey?: string;
  owner: string;
  ttlMs: number;
  logger: Logger;
  /** How many leases a group has, for the fair share (unbounded without membersKey). */
  groupSize?(group: string): number;
  /** What a lease is, for log lines: `source`, `shard`. */
  what: string;
  /** Who stops when one is lost, for its log line: `its poller`. */
  holder: string;
}

interface Held {
  spec: LeaseSpec;
  fence: LeaseFence;
  holding: Holding;
}

export class RedisLeases {
  private readonly held = new Map<string, Held>();
  /** Live members at the last heartbeat (this one included). */
  private live = 1;
  private readonly ttl: number;
  /** Heartbeat, renewal and retry interval (rule.ts). */
  private readonly beatMs: number;
  private timer: NodeJS.Timeout | undefined;
  private watchdog: NodeJS.Timeout | undefined;
  private tick: Promise<void> | undefined;
  /** The wait for the connection every acquire begins with, shared while it lasts. */
  private connecting: Promise<boolean> | undefined;
  private closed = false;
  private joined: Promise<void> | undefined;

  constructor(private readonly opts: RedisLeasesOptions) {
    this.ttl = Math.max(1_000, opts.ttlMs);
    // A member's heartbeat also finds who joined: a process that joins gets its share within about
    // a second.
    this.beatMs = heartbeatMs(this.ttl);
  }

  /** How many of `group`'s leases this member may hold. */
  share(group: string): number {
    if (!this.opts.groupSize) return Infinity;
    return Math.ceil(this.opts.groupSize(group) / Math.max(1, this.live));
  }

  /** Names of the leases held now (and not lost). */
  names(): string[] {
    return [...this.held].filter(([, h]) => !h.holding.lost.aborted).map(([name]) => name);
  }

  /** The fence of a lease held now, or undefined (checked against the monotonic clock first). */
  fence(name: string): LeaseFence | undefined {
    this.expireStale();
    const lease = this.held.get(name);
    return lease && !lease.holding.lost.aborted ? lease.fence : undefined;
  }

  markLost(name: string, reason: string): void {
    const lease = this.held.get(name);
    if (!lease?.holding.lose(new FeedsyncError(`lease of ${name} lost: ${reason}`, true))) return;
    this.opts.logger.error(
      { [this.opts.what]: name, reason },
      `lost the lease of ${this.opts.what} ${name}; ${this.opts.holder} stops`,
    );
  }

  /**
   * Resolves when held (undefined once `signal` aborts first), waiting while another member holds
   * it or this one holds its share of the group; `onWait` hears each new holder waited for.
   */
  async acquire(
    spec: LeaseSpec,
    signal: AbortSignal,
    onWait: (holder: string) => void = () => undefined,
  ): Promise<HeldRedisLease | undefined> {
    const { client, logger, what } = this.opts;
    this.startBeating();
    // The connection does not queue commands while connecting: wait for it once, quietly. The
    // shard consumers of a `work` process all start here together: one wait (one 'ready'
    // listener) for all of them.
    this.connecting ??= whenReady(client, 5_000).finally(() => (this.connecting = undefined));
    await this.connecting;
    await this.join();
    let announced: string | undefined;
    for (;;) {
      if (signal.aborted || this.closed) return undefined;
      if (this.held.has(spec.name))
        throw new FeedsyncError(`${what} ${spec.name} is already leased by this process`, false);
      try {
        const { lease, holder } = await this.tryAcquire(spec);
        if (lease) {
          this.held.set(spec.name, lease);
          logger.info(
            { [what]: spec.name, token: lease.fence.token, owner: this.opts.owner },
            `acquired the lease of ${what} ${spec.name}`,
          );
          return this.heldLease(lease);
        }
        const waitingFor = holder ?? `(none: this process holds its share of ${what}s)`;
        if (waitingFor !== announced) {
          announced = waitingFor;
          onWait(waitingFor);
        }
      } catch (err) {
        warnRedisFailure(
          client,
          logger,
          err,
          { [what]: spec.name },
          `cannot lease ${what} ${spec.name} in redis; retrying`,
        );
      }
      if (!(await sleep(this.beatMs, signal))) return undefined;
    }
  }

  /**
   * One try, for an operator command: the lease when it is free (renewed until released, like any
   * other), else who holds it.
   */
  async tryOnce(spec: LeaseSpec): Promise<HeldRedisLease | { holder: string }> {
    this.startBeating();
    const { lease, holder } = await this.tryAcquire(spec);
    if (!lease) return { holder: holder ?? 'unknown' };
    this.held.set(spec.name, lease);
    return this.heldLease(lease);
  }

  /**
   * Stops beating and lets what it holds go. Letting go is a courtesy (an unrenewed lease expires
   * by itself, a dead member drops out of the set): on a Redis that does not answer, close stops
   * waiting for it after CLOSE_WAIT_MS rather than spend the process's stop budget.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.timer);
    clearInterval(this.watchdog);
    await withDeadline(this.letGo(), CLOSE_WAIT_MS);
  }

  private async letGo(): Promise<void> {
    await this.tick;
    // Leases still held (a holder that did not stop) are released so a waiting member need not wait.
    await Promise.all(
      [...this.held.values()].map((lease) =>
        runScript(this.opts.client, RELEASE, [lease.fence.leaseKey], [lease.fence.value]).catch(
          () => undefined,
        ),
      ),
    );
    this.held.clear();
    const { membersKey } = this.opts;
    if (this.timer && membersKey)
      await this.opts.client.zrem(membersKey, this.opts.owner).catch(() => undefined);
  }

  /**
   * Before its first lease a member registers, so that it counts the members already there, and
   * then takes its share at once. It does not wait for members that may be starting too (as
   * Kafka's group.initial.rebalance.delay.ms does): among processes started together the first
   * takes what is free and lets the excess go at its heartbeats once the others have registered,
   * which costs a hand-over per lease (one sink call or page waited for), where a wait would hold
   * every start of every process back by a heartbeat.
   */
  private async join(): Promise<void> {
    // Shared by every acquire of this member (until Redis answers, or close()).
    this.joined ??= (async () => {
      if (!this.opts.membersKey) return;
      while (!this.closed && !(await this.heartbeat())) await sleep(this.beatMs);
    })();
    await this.joined;
  }

  private heldIn(group: string): number {
    let n = 0;
    for (const lease of this.held.values()) if (lease.spec.group === group) n++;
    return n;
  }

  /** Registers this member and counts the live ones; false (warned) when Redis did not answer. */
  private async heartbeat(): Promise<boolean> {
    const { client, membersKey, owner, logger } = this.opts;
    if (!membersKey) return true;
    try {
      const live = await runScript(client, HEARTBEAT, [membersKey], [owner, String(this.ttl)]);
      this.live = Math.max(1, Number(live));
      return true;
    } catch (err) {
      warnRedisFailure(client, logger, err, {}, 'cannot write the heartbeat to redis; will retry');
      return false;
    }
  }

  private async tryAcquire(spec: LeaseSpec): Promise<{ lease?: Held; holder?: string }> {
    const { client, owner } = this.opts;
    // `live` is as fresh as the last heartbeat (the timer's, or join's before a first lease).
    if (this.heldIn(spec.group) >= this.share(spec.group))
      return { holder: ownerOf(await client.get(spec.key)) };
    const sent = performance.now();
    const reply = (await runScript(
      client,
      ACQUIRE,
      [spec.key, spec.tokenKey],
      [owner, String(this.ttl)],
    )) as [number, string | null];
    const token = Number(reply[0]);
    if (token === 0) return { holder: ownerOf(reply[1]) };
    return {
      lease: {
        spec,
        fence: {
          leaseKey: spec.key,
          tokenKey: spec.tokenKey,
          value: String(reply[1]),
          token,
          ttlMs: this.ttl,
        },
        holding: new Holding(this.ttl, sent),
      },
    };
  }

  private heldLease(lease: Held): HeldRedisLease {
    const { client, logger, what } = this.opts;
    let released: Promise<void> | undefined;
    const name = lease.spec.name;
    return {
      fence: lease.fence,
      lost: lease.holding.lost,
      valid: () => lease.holding.valid(),
      handedOver: () => lease.holding.handedOver,
      release: () =>
        (released ??= (async () => {
          lease.holding.released = true;
          if (this.held.get(name) === lease) this.held.delete(name);
          try {
            await runScript(client, RELEASE, [lease.fence.leaseKey], [lease.fence.value]);
          } catch (err) {
            // It expires on its own after the TTL; a waiting member just waits a little longer.
            logger.warn(
              { [what]: name, err: errorMessage(err) },
              `cannot release the ${what} lease; it will expire`,
            );
          }
        })()),
    };
  }

  private async renew(lease: Held): Promise<void> {
    const sent = performance.now();
    try {
      const ok = Number(
        await runScript(
          this.opts.client,
          RENEW,
          [lease.fence.leaseKey, lease.fence.tokenKey],
          [lease.fence.value, String(this.ttl)],
        ),
      );
      if (ok === 1) lease.holding.renewed(sent);
      else this.markLost(lease.spec.name, 'taken by another process (or expired) before it was renewed');
    } catch (err) {
      // The watchdog gives it up by the monotonic clock; until then a renewal may still come through.
      warnRedisFailure(
        this.opts.client,
        this.opts.logger,
        err,
        { [this.opts.what]: lease.spec.name },
        `cannot renew the ${this.opts.what} lease; will retry`,
      );
    }
  }

  /** Over its share of a group (a member joined): let the excess go, longest-held first. */
  private rebalance(): void {
    const groups = new Map<string, Held[]>();
    for (const lease of this.held.values()) {
      if (lease.holding.lost.aborted) continue;
      const list = groups.get(lease.spec.group) ?? [];
      list.push(lease);
      groups.set(lease.spec.group, list);
    }
    const now = performance.now();
    for (const [group, leases] of groups) {
      const excess = leases.length - this.share(group);
      if (excess <= 0) continue;
      const candidates = leases
        .filter((l) => now - l.holding.since >= this.beatMs)
        .sort((a, b) => a.holding.since - b.holding.since);
      for (const lease of candidates.slice(0, excess)) {
        this.opts.logger.info(
          {
            [this.opts.what]: lease.spec.name,
            held: leases.length,
            share: this.share(group),
            members: this.live,
          },
          `handing ${this.opts.what} ${lease.spec.name} over: this process holds more than its share`,
        );
        lease.holding.handOver(
          new FeedsyncError(
            `lease of ${lease.spec.name} handed over to spread the load across processes`,
            true,
          ),
        );
      }
    }
  }

  private async beat(): Promise<void> {
    await this.heartbeat();
    // A lost lease is not kept alive while its holder winds down: it expires, and another member
    // takes it, even if this one never gets to release it. A handed-over one is, until released:
    // otherwise its expiry would let the next holder start beside a call still in flight here.
    const live = [...this.held.values()].filter((lease) => lease.holding.renewable());
    await Promise.all(live.map((lease) => this.renew(lease)));
    this.rebalance();
  }

  /** Independent of the beat, which may hang on a frozen Redis: stop before the key can expire. */
  private expireStale(): void {
    for (const [name, lease] of this.held)
      if (lease.holding.stale())
        this.markLost(
          name,
          `not renewed for ${Math.round(lease.holding.age())} ms (redis unreachable or frozen, or this process was paused); stopping before the lease can expire`,
        );
  }

  // Started by the first acquire: a process that only asks who holds what is not a member.
  private startBeating(): void {
    this.watchdog ??= setInterval(() => this.expireStale(), Math.max(50, Math.floor(this.ttl / 10)));
    this.timer ??= setInterval(() => {
      if (!this.tick) this.tick = this.beat().finally(() => (this.tick = undefined));
    }, this.beatMs);
  }
}
