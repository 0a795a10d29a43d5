// The checker on hand-made histories: each anomaly kind is detected, and what a fault permits
// (copies after kill -9, a counted copy after SIGSTOP, a cursor step back after a Redis kill, the
// new baseline of a cursor command) is not flagged.
import { describe, expect, it } from 'vitest';
import { check, GRACE_MS, type AnomalyKind } from './checker.js';
import type { Delivery, ExpectedEvent, FaultRecord, History, ReplayCommand } from './types.js';

const T0 = 1_000_000;

/** Events: scheduling 1..4 on subject s/a (ids 101..104), workflow on w/x listed 202, 201, 203. */
function events(): ExpectedEvent[] {
  const sched = [101, 102, 103, 104].map((id, i) => ({
    source: 'scheduling',
    service: 'scheduling' as const,
    key: `scheduling:${id}`,
    id,
    subject: 's/a',
    event_type: 'title_updated',
    resource_type: 'title',
    pos: i,
  }));
  const wf = [
    [202, 0],
    [201, 1],
    [203, 2],
  ].map(([id, pos]) => ({
    source: 'workflow',
    service: 'workflow' as const,
    key: `workflow:${id}`,
    id: id!,
    subject: 'w/x',
    event_type: 'job_updated',
    resource_type: 'job',
    pos: pos!,
  }));
  return [...sched, ...wf];
}

function base(overrides: Partial<History> = {}): History {
  return {
    seed: 1,
    scenario: 'local',
    t0: T0,
    tEnd: T0 + 100_000,
    events: events(),
    sinks: [
      { name: 'a', recorded: true, filter: {} },
      { name: 'j', recorded: false, filter: { sources: ['scheduling'] } },
    ],
    deliveries: [],
    delivered: { j: ['scheduling:101', 'scheduling:102', 'scheduling:103', 'scheduling:104'] },
    processes: [
      { name: 'run-a', role: 'run', pid: 10, start: T0 },
      { name: 'run-b', role: 'run', pid: 20, start: T0 },
    ],
    faults: [],
    cursorSamples: [],
    leaseSamples: [],
    cursorCommands: [],
    replays: [],
    afterLeaseLoss: [],
    mirrors: {},
    ...overrides,
  };
}

let clock = 0;
/** A delivery to sink `a` of `key` by `pid` from `start` (ms after T0) lasting `ms`. */
function d(key: string, pid: number, start: number, ms = 5, extra: Partial<Delivery> = {}): Delivery {
  const e = events().find((x) => x.key === key)!;
  return {
    sink: 'a',
    pid,
    key,
    subject: e.subject,
    id: e.id,
    source: e.source,
    start: T0 + start,
    end: T0 + start + ms,
    ok: true,
    why: null,
    fence: null,
    valid: null,
    batch: null,
    ...extra,
  };
}

/** Every event delivered once to `a`, in feed order, 10 ms apart from `from`. */
function cleanDeliveries(from = 1000, pid = 10): Delivery[] {
  const ordered = [...events()].sort((x, y) => x.source.localeCompare(y.source) || x.pos - y.pos);
  return ordered.map((e) => d(e.key, pid, from + 10 * clock++));
}

function kinds(h: History): Partial<Record<AnomalyKind, number>> {
  return Object.fromEntries(Object.entries(check(h).counts).filter(([, n]) => n > 0));
}

function fault(
  kind: FaultRecord['kind'],
  start: number,
  end: number,
  pids: number[] = [],
  target = 'x',
): FaultRecord {
  return { kind, target, pids, start: T0 + start, end: T0 + end, detail: {} };
}

describe('fault history checker', () => {
  it('a clean history has no anomaly', () => {
    clock = 0;
    const r = check(base({ deliveries: cleanDeliveries() }));
    expect(r.anomalies).toEqual([]);
    expect(r.stats.expected).toBe(7 + 4);
  });

  it('lost: a change a sink never received, per sink filter; a failed attempt is not a delivery', () => {
    clock = 0;
    const deliveries = cleanDeliveries().filter((x) => x.key !== 'workflow:203');
    deliveries.push(d('workflow:203', 10, 5000, 5, { ok: false }));
    const h = base({ deliveries, delivered: { j: ['scheduling:101', 'scheduling:102', 'scheduling:104'] } });
    const lost = check(h).anomalies.filter((a) => a.kind === 'lost');
    expect(lost.map((a) => `${a.sink} ${a.key}`).sort()).toEqual(['a workflow:203', 'j scheduling:103']);
  });

  it('unexpected: a change the sink filter excludes', () => {
    clock = 0;
    const h = base({ deliveries: cleanDeliveries() });
    h.delivered.j!.push('workflow:201');
    expect(kinds(h)).toEqual({ unexpected: 1 });
  });

  it('overlap: two deliveries of one subject in flight at once across processes', () => {
    clock = 0;
    const deliveries = cleanDeliveries();
    const first = deliveries.find((x) => x.key === 'scheduling:102')!;
    // pid 20 delivers 103 while pid 10 is still delivering 102.
    const i = deliveries.findIndex((x) => x.key === 'scheduling:103');
    deliveries[i] = d('scheduling:103', 20, first.start - T0 + 1, 8);
    const r = check(base({ deliveries }));
    expect(r.counts.overlap).toBe(1);
    expect(r.anomalies[0]!.detail).toMatch(/scheduling:102 \(pid 10.*overlaps scheduling:103 \(pid 20/);
  });

  it('overlap is permitted when one delivery was frozen in flight by SIGSTOP of its process', () => {
    clock = 0;
    const deliveries = cleanDeliveries(1000).filter((x) => x.key !== 'scheduling:102');
    // pid 10 starts 102 at 900, is frozen 950..20000, finishes it after; pid 20 redelivers it.
    deliveries.push(d('scheduling:102', 10, 900, 19_200));
    deliveries.push(d('scheduling:102', 20, 16_000, 5));
    const h = base({
      deliveries,
      faults: [fault('freeze', 950, 20_000, [10])],
      afterLeaseLoss: [{ pid: 10, sink: 'a', count: 1 }],
    });
    const r = check(h);
    expect(r.counts.overlap).toBe(0);
    expect(r.permitted.overlap.freeze).toBeGreaterThan(0);
  });

  it('order: a first delivery after a newer change of its subject was delivered (feed order, not id order)', () => {
    clock = 0;
    // Workflow lists 202 before 201: delivering 201 first is wrong, 202 first is right.
    const right = base({
      deliveries: [
        ...cleanDeliveries().filter((x) => x.source !== 'workflow'),
        d('workflow:202', 10, 100),
        d('workflow:201', 10, 200),
        d('workflow:203', 10, 300),
      ],
    });
    expect(kinds(right)).toEqual({});
    const wrong = base({
      deliveries: [
        ...cleanDeliveries().filter((x) => x.source !== 'workflow'),
        d('workflow:201', 10, 100),
        d('workflow:202', 10, 200),
        d('workflow:203', 10, 300),
      ],
    });
    const r = check(wrong);
    expect(r.counts.order).toBe(1);
    expect(r.anomalies[0]!.key).toBe('workflow:202');
  });

  it('order: a change a reset skipped and a rewind queued again is not judged', () => {
    clock = 0;
    // 102 skipped by a reset to latest (101 → 103), queued again by a rewind (104 → 101): after 103.
    const deliveries = [
      ...cleanDeliveries().filter((x) => x.key !== 'scheduling:102'),
      d('scheduling:102', 10, 9000),
      d('scheduling:103', 10, 9010),
      d('scheduling:104', 10, 9020),
    ];
    const reset = {
      source: 'scheduling',
      args: ['cursor', 'reset'],
      start: T0 + 100,
      end: T0 + 200,
      ok: true,
      before: 101,
      after: 103,
      output: '',
    };
    const rewind = {
      source: 'scheduling',
      args: ['cursor', 'set'],
      start: T0 + 8000,
      end: T0 + 8500,
      ok: true,
      before: 104,
      after: 101,
      output: '',
    };
    expect(kinds(base({ deliveries, cursorCommands: [reset, rewind] }))).toEqual({});
    expect(kinds(base({ deliveries, cursorCommands: [rewind] }))).toEqual({ order: 1 });
  });

  it('copy: the same key twice with no fault is flagged', () => {
    clock = 0;
    const deliveries = [...cleanDeliveries(), d('scheduling:101', 10, 9000)];
    const r = check(base({ deliveries }));
    expect(r.counts.copy).toBe(1);
    expect(r.copies.none).toBe(1);
  });

  it('a copy after kill -9 of the process that delivered first is allowed (finished or cut short)', () => {
    clock = 0;
    const deliveries = [
      ...cleanDeliveries(),
      // pid 10 delivered 104 (ok), and started 101 again but died before it ended.
      d('scheduling:101', 10, 2500, 5, { end: undefined, ok: undefined }),
      d('scheduling:104', 30, 4000),
      d('scheduling:101', 30, 4010),
    ];
    const h = base({
      deliveries,
      faults: [fault('kill9', 3000, 3000, [10])],
      processes: [
        { name: 'run-a', role: 'run', pid: 10, start: T0, end: T0 + 3000, how: 'killed' },
        { name: 'run-a', role: 'run', pid: 30, start: T0 + 3500 },
      ],
    });
    const r = check(h);
    expect(r.anomalies).toEqual([]);
    expect(r.copies.kill9).toBe(3);
    expect(r.stats.unfinished).toBe(1);
  });

  it('a copy whose first delivery started as Redis came back from a kill is allowed; long after, not', () => {
    // pid 10 goes on with its slice as Redis restarts without its last second (the job's lock and
    // progress); pid 20 takes the job Redis gave back and delivers 101 again.
    const around = (first: number) => {
      clock = 0;
      return [
        ...cleanDeliveries(20_000).filter((x) => x.key !== 'scheduling:101'),
        d('scheduling:101', 10, first),
        d('scheduling:101', 20, first + 40),
      ];
    };
    const kill = fault('redis-kill', 3000, 4000);
    const processes = [
      { name: 'w1', role: 'work' as const, pid: 10, start: T0 },
      { name: 'w2', role: 'work' as const, pid: 20, start: T0 },
    ];
    expect(kinds(base({ deliveries: around(4001), faults: [kill], processes }))).toEqual({});
    expect(kinds(base({ deliveries: around(4000 + GRACE_MS + 100), faults: [kill], processes }))).toEqual({
      copy: 1,
    });
  });

  it('copies after SIGSTOP: allowed for deliveries in flight at the freeze if counted; not otherwise', () => {
    clock = 0;
    // 101 and 102 of subject s/a around a freeze of pid 10; 103 and 104 after them, by pid 20.
    const common = [
      ...cleanDeliveries(1000).filter((x) => x.source === 'workflow'),
      d('scheduling:103', 20, 16_200),
      d('scheduling:104', 20, 16_300),
    ];
    const inFlight = [d('scheduling:101', 10, 900, 19_500), d('scheduling:101', 20, 16_000)];
    const freeze = fault('freeze', 950, 20_000, [10]);
    // Counted: fine.
    const counted = check(
      base({
        deliveries: [...common, ...inFlight, d('scheduling:102', 20, 16_100)],
        faults: [freeze],
        afterLeaseLoss: [{ pid: 10, sink: 'a', count: 1 }],
      }),
    );
    expect(counted.anomalies).toEqual([]);
    expect(counted.copies.freeze).toBe(1);
    // Not counted by the metric.
    const uncounted = check(
      base({ deliveries: [...common, ...inFlight, d('scheduling:102', 20, 16_100)], faults: [freeze] }),
    );
    expect(Object.fromEntries(Object.entries(uncounted.counts).filter(([, n]) => n > 0))).toEqual({
      'copy-uncounted': 1,
    });
    // The frozen process starting a NEW delivery after it resumed, of a change the other one delivered.
    const restarted = check(
      base({
        deliveries: [
          ...common,
          d('scheduling:101', 20, 16_000),
          d('scheduling:101', 10, 20_100),
          d('scheduling:102', 20, 16_100),
        ],
        faults: [freeze],
        afterLeaseLoss: [{ pid: 10, sink: 'a', count: 5 }],
      }),
    );
    expect(restarted.counts.copy).toBe(1);
    // The local queue: the frozen `run` exited 1 on resuming, having acknowledged the in-flight
    // delivery in memory only; the standby redelivered it as after a crash, uncounted by design.
    const crashed = check(
      base({
        deliveries: [...common, ...inFlight, d('scheduling:102', 20, 16_100)],
        faults: [freeze],
        processes: [
          { name: 'run-a', role: 'run', pid: 10, start: T0, end: T0 + 20_200, how: 'exited', code: 1 },
          { name: 'run-b', role: 'run', pid: 20, start: T0 },
        ],
      }),
    );
    expect(crashed.anomalies).toEqual([]);
    expect(crashed.copies.crash).toBe(1);
    // Not so with bullmq: there the count is required.
    expect(
      kinds({
        ...base({ deliveries: [...common, ...inFlight, d('scheduling:102', 20, 16_100)], faults: [freeze] }),
        scenario: 'bullmq',
      }),
    ).toEqual({ 'copy-uncounted': 1 });
  });

  it('copies whose acknowledgement a store fault refused are allowed; around a sink fault they are not', () => {
    clock = 0;
    const deliveries = [...cleanDeliveries(1000), d('scheduling:103', 10, 9000)];
    const at = deliveries.find((x) => x.key === 'scheduling:103')!.start - T0;
    expect(kinds(base({ deliveries, faults: [fault('store-lock', at - 10, at + 1000)] }))).toEqual({});
    expect(kinds(base({ deliveries, faults: [fault('sink-fail', at - 10, at + 1000, [], 'a')] }))).toEqual({
      copy: 1,
    });
  });

  it('cursor backwards: flagged; permitted right after a Redis kill; a command sets a new baseline', () => {
    clock = 0;
    const samples = [100, 150, 120, 180].map((value, i) => ({
      source: 'scheduling',
      t: T0 + 1000 * (i + 1),
      value,
    }));
    const back = check(base({ deliveries: cleanDeliveries(), cursorSamples: samples }));
    expect(back.counts['cursor-backwards']).toBe(1);
    const redis = check(
      base({
        deliveries: cleanDeliveries(),
        cursorSamples: samples,
        faults: [fault('redis-kill', 2500, 2600)],
      }),
    );
    expect(redis.counts['cursor-backwards']).toBe(0);
    expect(redis.permitted.cursorBackwards['redis-kill']).toBe(1);
    // A successful rewind between the 2nd and 3rd sample: 120 is the new baseline.
    const rewound = check(
      base({
        deliveries: cleanDeliveries(),
        cursorSamples: samples,
        cursorCommands: [
          {
            source: 'scheduling',
            args: ['cursor', 'set', 'scheduling', '110'],
            start: T0 + 2100,
            end: T0 + 2400,
            ok: true,
            before: 150,
            after: 110,
            output: '',
          },
        ],
      }),
    );
    expect(rewound.counts['cursor-backwards']).toBe(0);
  });

  it('cursor-overwritten: below a forward reset after it printed success', () => {
    clock = 0;
    const samples = [100, 150, 140].map((value, i) => ({
      source: 'scheduling',
      t: T0 + 1000 * (i + 1),
      value,
    }));
    const r = check(
      base({
        deliveries: cleanDeliveries(),
        cursorSamples: samples,
        cursorCommands: [
          {
            source: 'scheduling',
            args: ['cursor', 'reset', 'scheduling', '--to', 'latest'],
            start: T0 + 2100,
            end: T0 + 2400,
            ok: true,
            before: 100,
            after: 150,
            output: '',
          },
        ],
      }),
    );
    expect(Object.fromEntries(Object.entries(r.counts).filter(([, n]) => n > 0))).toEqual({
      'cursor-overwritten': 1,
    });
  });

  it('a reset to latest exempts the events it skipped from "lost"', () => {
    clock = 0;
    const deliveries = cleanDeliveries().filter(
      (x) => x.key !== 'scheduling:102' && x.key !== 'scheduling:103',
    );
    const cmd = {
      source: 'scheduling',
      args: ['cursor', 'reset'],
      start: T0 + 500,
      end: T0 + 600,
      ok: true,
      before: 101,
      after: 103,
      output: '',
    };
    const h = base({
      deliveries,
      cursorCommands: [cmd],
      delivered: { j: ['scheduling:101', 'scheduling:104'] },
    });
    expect(kinds(h)).toEqual({});
    expect(
      kinds({ ...h, cursorCommands: [{ ...cmd, ok: false, before: undefined, after: undefined }] }),
    ).toEqual({ lost: 4 });
  });

  it('rewind-not-honoured: a rewind that printed success but was never honoured; honoured: copies allowed', () => {
    clock = 0;
    const deliveries = cleanDeliveries(1000);
    const cmd = {
      source: 'scheduling',
      args: ['cursor', 'set', 'scheduling', '102'],
      start: T0 + 5000,
      end: T0 + 5300,
      ok: true,
      before: 104,
      after: 102,
      output: '',
    };
    const ignored = check(base({ deliveries, cursorCommands: [cmd] }));
    expect(ignored.counts['rewind-not-honoured']).toBe(1);
    expect(ignored.anomalies[0]!.detail).toMatch(/2 \(sink, change\) pairs it put back/);
    const honoured = check(
      base({
        deliveries: [...deliveries, d('scheduling:103', 10, 6000), d('scheduling:104', 10, 6010)],
        cursorCommands: [cmd],
      }),
    );
    expect(honoured.anomalies).toEqual([]);
    expect(honoured.copies.cursor).toBe(2);
  });

  /** `feedsync replay --sink <sink> --source scheduling --from 102` at 5 s that printed "it was at 104". */
  function replay(extra: Partial<ReplayCommand> = {}): ReplayCommand {
    return {
      sink: 'a',
      source: 'scheduling',
      from: 102,
      before: 104,
      start: T0 + 5000,
      end: T0 + 5800,
      ok: true,
      output: 'a from scheduling: replaying after event 102 (it was at 104); …',
      ...extra,
    };
  }

  it('replay: a copy after ID to the replayed sink, started after the command, is explained', () => {
    clock = 0;
    const deliveries = [
      ...cleanDeliveries(1000),
      d('scheduling:103', 10, 6000),
      d('scheduling:104', 10, 6010),
    ];
    const r = check(base({ deliveries, replays: [replay()] }));
    expect(r.anomalies).toEqual([]);
    expect(r.copies.replay).toBe(2);
    // Not explained: without the replay, by a refused one, by one that started after the copy, or
    // for a key at or below ID.
    expect(kinds(base({ deliveries }))).toEqual({ copy: 2 });
    expect(
      kinds(
        base({
          deliveries,
          replays: [replay({ ok: false, before: undefined, output: 'a replay is still running' })],
        }),
      ),
    ).toEqual({ copy: 2, 'replay-unexplained-refusal': 1 });
    // (103 came before that replay started: a copy, and that replay still owes it.)
    expect(kinds(base({ deliveries, replays: [replay({ start: T0 + 6005, end: T0 + 6500 })] }))).toEqual({
      copy: 1,
      'replay-not-honoured': 1,
    });
    expect(
      kinds(
        base({
          deliveries: [...deliveries, d('scheduling:102', 10, 6020)],
          replays: [replay()],
        }),
      ),
    ).toEqual({ copy: 1 });
    // Another source's copies are not explained either.
    expect(
      kinds(base({ deliveries: [...deliveries, d('workflow:203', 10, 6030)], replays: [replay()] })),
    ).toEqual({ copy: 1 });
  });

  it('replay: a copy to a sink that was not replayed is not explained (the other sinks are untouched)', () => {
    clock = 0;
    const toA = cleanDeliveries(1000);
    const toB = toA.map((x) => ({ ...x, sink: 'b', start: x.start + 1, end: x.end! + 1 }));
    const h = base({
      sinks: [
        { name: 'a', recorded: true, filter: {} },
        { name: 'b', recorded: true, filter: {} },
      ],
      delivered: {},
    });
    const againB = [103, 104].map((id, i) => ({ ...d(`scheduling:${id}`, 10, 6000 + 10 * i), sink: 'b' }));
    const replayB = replay({ sink: 'b' });
    expect(kinds({ ...h, deliveries: [...toA, ...toB, ...againB], replays: [replayB] })).toEqual({});
    // The same copies to a: flagged, the replay of b explains nothing for a.
    const againA = [103, 104].map((id, i) => d(`scheduling:${id}`, 10, 6100 + 10 * i));
    const r = check({ ...h, deliveries: [...toA, ...toB, ...againB, ...againA], replays: [replayB] });
    expect(r.counts.copy).toBe(2);
    expect(r.anomalies.every((a) => a.kind === 'copy' && a.sink === 'a')).toBe(true);
  });

  it('replay-not-honoured: what an accepted replay put back and the sink had received must come again', () => {
    clock = 0;
    const deliveries = cleanDeliveries(1000);
    const ignored = check(base({ deliveries, replays: [replay()] }));
    expect(ignored.counts['replay-not-honoured']).toBe(1);
    expect(ignored.anomalies[0]!.detail).toMatch(
      /2 changes it put back were never delivered to a again \(e\.g\. scheduling:103, scheduling:104\)/,
    );
    // Half honoured: still flagged, for the one missing.
    const half = check(
      base({ deliveries: [...deliveries, d('scheduling:103', 10, 6000)], replays: [replay()] }),
    );
    expect(half.counts['replay-not-honoured']).toBe(1);
    expect(half.anomalies[0]!.key).toBe('scheduling:104');
    // Only (from, before]: a replay "at 103" owes 103 alone; the changes after it are the shared stream's.
    expect(
      kinds(
        base({
          deliveries: [...deliveries, d('scheduling:103', 10, 6000)],
          replays: [replay({ before: 103 })],
        }),
      ),
    ).toEqual({});
    // A change the sink had not received before the command (still in flight at its start) is not owed.
    const late = deliveries.map((x) =>
      x.key === 'scheduling:104' ? { ...x, start: T0 + 4990, end: T0 + 5010 } : x,
    );
    expect(
      kinds(base({ deliveries: [...late, d('scheduling:103', 10, 6000)], replays: [replay()] })),
    ).toEqual({});
    // A refused replay owes nothing.
    expect(
      kinds(
        base({
          deliveries,
          replays: [replay({ ok: false, before: undefined, output: 'nothing to replay after event 102' })],
        }),
      ),
    ).toEqual({});
  });

  it('replay-unexplained-refusal: refused only for a documented reason; "still running" needs an accepted one', () => {
    clock = 0;
    const deliveries = [
      ...cleanDeliveries(1000),
      d('scheduling:103', 10, 6000),
      d('scheduling:104', 10, 6010),
    ];
    const refused = (output: string, start = 5900): ReplayCommand =>
      replay({ ok: false, before: undefined, start: T0 + start, end: T0 + start + 700, output });
    const running = refused(
      '[stderr] sink a on source scheduling: a replay is still running (at event 102); wait until it has caught up (feedsync status)',
    );
    expect(kinds(base({ deliveries, replays: [replay(), running] }))).toEqual({});
    expect(
      kinds(
        base({
          deliveries,
          replays: [
            replay(),
            refused(
              'sink a on source scheduling lags behind at event 90 (parked): a replay from 102 would skip events',
            ),
            refused('sink a on source scheduling was moved while the replay was being written; run it again'),
            refused(
              "sink a on source scheduling: nothing to replay after event 102 (the source's cursor is 102)",
            ),
          ],
        }),
      ),
    ).toEqual({});
    // "Still running" with no replay accepted before it; a failure no refusal explains.
    expect(kinds(base({ deliveries: cleanDeliveries(1000), replays: [running] }))).toEqual({
      'replay-unexplained-refusal': 1,
    });
    const r = check(
      base({ deliveries, replays: [replay(), refused('Error: connect ECONNREFUSED 127.0.0.1:6379')] }),
    );
    expect(r.counts['replay-unexplained-refusal']).toBe(1);
    expect(r.anomalies[0]!.detail).toMatch(/ECONNREFUSED/);
  });

  it('cursor-accepted-while-held: success while the same holder and token were there before and after', () => {
    clock = 0;
    const cmd = {
      source: 'scheduling',
      args: ['cursor', 'set', 'scheduling', '104'],
      start: T0 + 5000,
      end: T0 + 5300,
      ok: true,
      before: 104,
      after: 104,
      output: '',
    };
    const lease = (t: number, token: number) => ({ source: '*', t: T0 + t, owner: 'h:10', token });
    expect(
      kinds(
        base({
          deliveries: cleanDeliveries(),
          cursorCommands: [cmd],
          leaseSamples: [lease(4900, 3), lease(5400, 3)],
        }),
      ),
    ).toEqual({
      'cursor-accepted-while-held': 1,
    });
    expect(
      kinds(
        base({
          deliveries: cleanDeliveries(),
          cursorCommands: [cmd],
          leaseSamples: [lease(4900, 3), lease(5400, 5)],
        }),
      ),
    ).toEqual({});
  });

  it('token-regression: a new lease owner with a token not above an earlier one; a newer process with a lower fence token', () => {
    clock = 0;
    const lease = (t: number, owner: string | null, token: number | null) => ({
      source: '*',
      t: T0 + t,
      owner,
      token,
    });
    const grows = [
      lease(100, 'h:10', 1),
      lease(200, 'h:10', 1),
      lease(300, null, null),
      lease(400, 'h:20', 2),
    ];
    expect(kinds(base({ deliveries: cleanDeliveries(), leaseSamples: grows }))).toEqual({});
    const reused = [lease(100, 'h:10', 1), lease(300, null, null), lease(400, 'h:20', 1)];
    expect(kinds(base({ deliveries: cleanDeliveries(), leaseSamples: reused }))).toEqual({
      'token-regression': 1,
    });
    // Redis killed in between, its AOF cut: still an anomaly (tokens come from its clock, not a counter).
    expect(
      kinds(
        base({
          deliveries: cleanDeliveries(),
          leaseSamples: reused,
          faults: [fault('redis-kill', 350, 360)],
        }),
      ),
    ).toEqual({ 'token-regression': 1 });
    // Redis killed with its AOF cut shows an earlier lease again (h:10's, handed over to h:20 in
    // the lost second): its state went back, no token was handed out again.
    const restored = [
      lease(100, 'h:10', 1),
      lease(300, 'h:20', 2),
      lease(400, 'h:10', 1),
      lease(600, 'h:30', 3),
    ];
    expect(
      kinds(
        base({
          deliveries: cleanDeliveries(),
          leaseSamples: restored,
          faults: [fault('redis-kill', 350, 360)],
        }),
      ),
    ).toEqual({});
    // Delivery fences: pid 30, started after pid 10 delivered with token 2, delivers with token 1.
    const fence = (token: number) => ({ fence: { scope: 'store:x', token } });
    const deliveries = [
      d('scheduling:101', 10, 100, 5, fence(2)),
      d('scheduling:102', 10, 200, 5, fence(2)),
      d('scheduling:103', 30, 5000, 5, fence(1)),
      d('scheduling:104', 30, 5100, 5, fence(1)),
      ...cleanDeliveries(6000).filter((x) => x.source === 'workflow'),
    ];
    const processes = [
      { name: 'run-a', role: 'run' as const, pid: 10, start: T0, end: T0 + 3000, how: 'killed' as const },
      { name: 'run-a', role: 'run' as const, pid: 30, start: T0 + 4000 },
    ];
    expect(kinds(base({ deliveries, processes }))).toEqual({ 'token-regression': 1 });
    // A process frozen with an old token (started before the newer one delivered) is what fences are for.
    expect(
      kinds(
        base({
          deliveries,
          processes: [
            { ...processes[0]!, end: undefined, how: undefined },
            { ...processes[1]!, start: T0 },
          ],
        }),
      ),
    ).toEqual({});
  });

  it('mirror-stale: the mirror sink ends with a subject not at its last event in feed order, or not deleted', () => {
    clock = 0;
    const row = (last: number, deleted = false) => ({ last, deleted });
    // s/a's last event is 104; w/x's last in feed order is 203 (workflow lists 202, 201, 203).
    const ok = { 's/a': row(104), 'w/x': row(203) };
    expect(kinds(base({ deliveries: cleanDeliveries(), mirrors: { mirror: ok } }))).toEqual({});
    expect(
      kinds(base({ deliveries: cleanDeliveries(), mirrors: { mirror: { ...ok, 's/a': row(103) } } })),
    ).toEqual({
      'mirror-stale': 1,
    });
    expect(kinds(base({ deliveries: cleanDeliveries(), mirrors: { mirror: { 's/a': row(104) } } }))).toEqual({
      'mirror-stale': 1,
    });
    // A deleted subject: the tombstone is what counts, whatever the feed lists after the delete.
    const h = base({ deliveries: cleanDeliveries() });
    h.events = h.events.map((e) => (e.key === 'workflow:201' ? { ...e, event_type: 'job_deleted' } : e));
    expect(kinds({ ...h, mirrors: { mirror: { ...ok, 'w/x': row(201, true) } } })).toEqual({});
    expect(kinds({ ...h, mirrors: { mirror: ok } })).toEqual({ 'mirror-stale': 1 });
  });

  it('stall: a failing sink keeps another sink from delivering what was queued for it', () => {
    clock = 0;
    const h = base({
      sinks: [
        { name: 'a', recorded: true, filter: {} },
        { name: 'b', recorded: true, filter: {} },
      ],
      delivered: {},
    });
    // a gets everything at 1 s; b gets the last workflow change only at 20 s; a fails 2..18 s.
    const toA = cleanDeliveries(1000);
    const toB = toA.map((x, i) => ({
      ...x,
      sink: 'b',
      start: x.start + (x.key === 'workflow:203' ? 19_000 : 100 + i),
      end: x.end! + (x.key === 'workflow:203' ? 19_000 : 100 + i),
    }));
    const failing = fault('sink-fail', 2000, 18_000, [], 'a');
    expect(kinds({ ...h, deliveries: [...toA, ...toB], faults: [failing] })).toEqual({ stall: 1 });
    // With a process fault in that time the stall is explained.
    expect(
      kinds({ ...h, deliveries: [...toA, ...toB], faults: [failing, fault('kill9', 5000, 5000, [99])] }),
    ).toEqual({});
  });
});
