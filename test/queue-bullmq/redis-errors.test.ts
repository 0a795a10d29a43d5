// The Redis failure classifier and the monitor's bookkeeping, without a server: the error texts
// and codes are the ones Redis 7, ioredis and Node's TLS produce (seen in the process tests).
import { pino } from 'pino';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { PipelineEvents, type RedisErrorKind } from '../../src/core/events.js';
import { FeedsyncError } from '../../src/core/errors.js';
import { classifyRedisError, needsOperator, redisErrorHint } from '../../src/queue/bullmq/redis-errors.js';
import { createRedisMonitor } from '../../src/queue/bullmq/redis-monitor.js';

function replyError(message: string): Error {
  const err = new Error(message);
  err.name = 'ReplyError';
  return err;
}

function coded(code: string, message = code): Error {
  return Object.assign(new Error(message), { code });
}

describe('classifyRedisError', () => {
  const cases: [string, unknown, RedisErrorKind][] = [
    ['WRONGPASS', replyError('WRONGPASS invalid username-password pair or user is disabled.'), 'wrongpass'],
    ['NOAUTH', replyError('NOAUTH Authentication required.'), 'wrongpass'],
    ['old redis', replyError('ERR invalid password'), 'wrongpass'],
    ['NOPERM command', replyError("NOPERM this user has no permissions to run the 'eval' command"), 'noperm'],
    [
      'NOPERM key',
      replyError('NOPERM this user has no permissions to access one of the keys used as arguments'),
      'noperm',
    ],
    [
      'denied inside a script (Redis 7)',
      replyError(
        "ERR The user executing the script can't run this command or subcommand script: 67ed14c1, on @user_script:1.",
      ),
      'noperm',
    ],
    ['MOVED', replyError('MOVED 3999 127.0.0.1:6381'), 'moved'],
    ['ASK', replyError('ASK 3999 127.0.0.1:6381'), 'moved'],
    ['CLUSTERDOWN', replyError('CLUSTERDOWN The cluster is down'), 'moved'],
    [
      'a TLS decode_error alert (a handshake cut by a failover)',
      Object.assign(new Error('ssl3_read_bytes:tlsv1 alert decode error:SSL alert number 50'), {
        code: 'ERR_SSL_TLSV1_ALERT_DECODE_ERROR',
      }),
      'unreachable',
    ],
    ['READONLY', replyError("READONLY You can't write against a read only replica."), 'readonly'],
    ['refused', coded('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:6379'), 'unreachable'],
    ['timeout', coded('ETIMEDOUT', 'connect ETIMEDOUT'), 'unreachable'],
    ['closed', new Error('Connection is closed.'), 'unreachable'],
    ['offline', new Error("Stream isn't writeable and enableOfflineQueue options is false"), 'unreachable'],
    ['command timeout', new Error('Command timed out'), 'unreachable'],
    ['untrusted', coded('SELF_SIGNED_CERT_IN_CHAIN', 'self-signed certificate in certificate chain'), 'tls'],
    [
      'untrusted leaf',
      coded('UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'unable to verify the first certificate'),
      'tls',
    ],
    [
      'altname',
      coded('ERR_TLS_CERT_ALTNAME_INVALID', "Hostname/IP does not match certificate's altnames"),
      'tls',
    ],
    [
      'client certificate required',
      coded('ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED', 'ssl3_read_bytes:tlsv13 alert certificate required'),
      'tls',
    ],
    ['script error', replyError('FENCED the source lease is no longer ours; cursor not moved'), 'other'],
    ['NOSCRIPT', replyError('NOSCRIPT No matching script. Please use EVAL.'), 'other'],
    // Our own messages quote the reply: still the reply's kind.
    [
      'wrapped',
      new FeedsyncError(
        "lease of a lost: cannot renew within 1000 ms: NOPERM this user has no permissions to run the 'eval' command",
        true,
      ),
      'noperm',
    ],
  ];
  it.each(cases)('%s', (_name, err, kind) => {
    expect(classifyRedisError(err)).toBe(kind);
  });

  it('classifies a transaction refused at EXEC by the error of the command that caused it', () => {
    const execAbort = Object.assign(
      replyError('EXECABORT Transaction discarded because of previous errors.'),
      {
        previousErrors: [replyError("NOPERM this user has no permissions to run the 'hset' command")],
      },
    );
    expect(classifyRedisError(execAbort)).toBe('noperm');
  });

  it('says what to do, for each kind', () => {
    expect(redisErrorHint(replyError('NOPERM x'))).toBe(
      'the Redis user lacks a permission: see docs/scaled-mode.md#redis-acl',
    );
    expect(redisErrorHint(replyError('READONLY x'))).toMatch(
      /connected to a replica: point queue\.redis_url at the primary/,
    );
    expect(redisErrorHint(replyError('MOVED 1 h:1'))).toMatch(
      /Redis Cluster node behind a single-server URL \(name the cluster with redis\+cluster:\/\//,
    );
    expect(redisErrorHint(replyError('CLUSTERDOWN The cluster is down'))).toBe(
      'the Redis Cluster is down or failing over (CLUSTERDOWN); retried',
    );
    expect(redisErrorHint(replyError('WRONGPASS x'))).toMatch(/rejected the credentials/);
    expect(redisErrorHint(coded('SELF_SIGNED_CERT_IN_CHAIN'))).toMatch(
      /not trusted: set queue\.redis_tls\.ca_file/,
    );
    expect(redisErrorHint(coded('ERR_TLS_CERT_ALTNAME_INVALID'))).toMatch(/queue\.redis_tls\.servername/);
    expect(redisErrorHint(coded('ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED'))).toMatch(
      /refused the handshake.*queue\.redis_tls\.cert_file and key_file/,
    );
    expect(needsOperator('noperm')).toBe(true);
    expect(needsOperator('unreachable')).toBe(false);
  });
});

function capture() {
  const lines: Record<string, unknown>[] = [];
  const logger = pino(
    { level: 'debug' },
    new Writable({
      write(chunk: Buffer, _enc, cb) {
        lines.push(JSON.parse(chunk.toString('utf8')) as Record<string, unknown>);
        cb();
      },
    }),
  );
  return { lines, logger };
}

describe('redis monitor', () => {
  const EVAL = { key: 'script abc', name: 'EVAL' };
  const noperm = replyError("NOPERM this user has no permissions to run the 'eval' command");

  it('counts every failure, logs the first and then one line a minute with the count, and on close the rest', () => {
    let now = 0;
    const events = new PipelineEvents();
    const kinds: string[] = [];
    events.on('redis:error', (e) => kinds.push(e.kind));
    const { lines, logger } = capture();
    const monitor = createRedisMonitor({ logger, where: 'redis://127.0.0.1:6379', events, now: () => now });
    for (let i = 0; i < 300; i++) {
      monitor.failed('lock', noperm, EVAL);
      now += 250;
    }
    expect(kinds).toHaveLength(300);
    expect(kinds.every((k) => k === 'noperm')).toBe(true);
    const warned = lines.filter((l) => l.level === 40);
    // 75 s of failures four times a second: the first line, one a minute later with the count.
    expect(warned).toHaveLength(2);
    expect(warned[0]).toMatchObject({
      msg: 'redis command refused (noperm): the Redis user lacks a permission: see docs/scaled-mode.md#redis-acl',
      kind: 'noperm',
      role: 'lock',
      command: 'EVAL',
    });
    expect(warned[0]!.repeated).toBeUndefined();
    expect(warned[1]!.repeated).toBe(239);
    monitor.close();
    expect(lines.filter((l) => l.level === 40)).toHaveLength(3);
    expect(lines.at(-1)!.repeated).toBe(59);
  });

  it('holds a refused command against readiness until that command succeeds; a connection failure until it is ready', () => {
    let now = 0;
    const monitor = createRedisMonitor({ logger: capture().logger, where: 'x', now: () => now });
    monitor.failed('producer', noperm, EVAL);
    monitor.failed('worker', coded('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:1'));
    expect(monitor.problems().map((p) => [p.role, p.kind, p.command])).toEqual([
      ['producer', 'noperm', 'EVAL'],
      ['worker', 'unreachable', undefined],
    ]);
    // Another command succeeding on the same connection proves nothing about the refused one.
    monitor.succeeded('producer', { key: 'hget', name: 'HGET' });
    monitor.succeeded('worker');
    expect(monitor.problems().map((p) => p.kind)).toEqual(['noperm']);
    monitor.succeeded('producer', EVAL);
    expect(monitor.problems()).toEqual([]);
    // A closed connection's failure (or a refused command never tried again) goes stale.
    monitor.failed('admin', coded('ECONNREFUSED'));
    monitor.failed('admin', noperm, EVAL);
    now += 31_000;
    expect(monitor.problems().map((p) => p.kind)).toEqual(['noperm']);
    now += 2 * 60_000;
    expect(monitor.problems()).toEqual([]);
  });

  it('ignores command failures that are not the server refusing (timeouts, script errors): the connection reports those', () => {
    const events = new PipelineEvents();
    let count = 0;
    events.on('redis:error', () => count++);
    const monitor = createRedisMonitor({ logger: capture().logger, where: 'x', events });
    monitor.failed('producer', new Error('Command timed out'), EVAL);
    monitor.failed('producer', replyError('FENCED the source lease is no longer ours'), EVAL);
    expect(count).toBe(0);
    expect(monitor.problems()).toEqual([]);
  });

  it("rate-limits a caller's retried warnings and leaves refused commands (already reported) at debug", () => {
    let now = 0;
    const { lines, logger } = capture();
    const monitor = createRedisMonitor({ logger, where: 'x', now: () => now });
    for (let i = 0; i < 100; i++) {
      monitor.warn(
        logger,
        coded('ECONNREFUSED', 'connect ECONNREFUSED'),
        { source: 'a' },
        'cannot lease source a',
      );
      monitor.warn(logger, noperm, { source: 'a' }, 'cannot lease source a');
      now += 100;
    }
    const warned = lines.filter((l) => l.level === 40);
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ source: 'a', kind: 'unreachable', msg: 'cannot lease source a' });
    expect(lines.filter((l) => l.level === 20)).toHaveLength(100);
  });
});
