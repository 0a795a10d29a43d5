// The soak: seeded fault runs back to back, local and bullmq in turn, for SOAK_MINUTES (default
// 5), with more faults per run and longer ones than the short runs in `npm test`. Prints one line
// per run and, at the end, a table: fault kind → injected; anomaly kind → count; the seeds that
// failed (replay one with FAULT_SEED=<seed> FAULT_SCENARIO=<scenario> npm run soak, or with
// FAULT_SEED=<seed> npx vitest run test/faults/<scenario>.test.ts for the short variant).
// Run it with `npm run soak` (scripts/soak.mjs); this file is not part of `npm test`.
import { afterAll, describe, expect, it } from 'vitest';
import { ANOMALY_KINDS } from './checker.js';
import { cleanupFaultRuns, runFaultScenario, type RunResult } from './runner.js';
import { FAULT_KINDS, type Scenario } from './types.js';

const minutes = Number(process.env.SOAK_MINUTES ?? 5);
const scenarios = (process.env.FAULT_SCENARIO ?? process.env.SOAK_SCENARIOS ?? 'local,bullmq').split(
  ',',
) as Scenario[];
const replay = process.env.FAULT_SEED;
const baseSeed = Number(process.env.SOAK_SEED ?? replay ?? Math.floor(Math.random() * 2 ** 31));

function table(rows: [string, string | number][], head: [string, string]): string {
  const w = Math.max(head[0].length, ...rows.map(([k]) => k.length));
  return [`  ${head[0].padEnd(w)}  ${head[1]}`, ...rows.map(([k, v]) => `  ${k.padEnd(w)}  ${v}`)].join('\n');
}

describe(`fault soak: ${minutes} min, ${scenarios.join(' + ')}, seeds from ${baseSeed}`, () => {
  afterAll(cleanupFaultRuns);
  it('no anomaly in any run', { timeout: (minutes + 6) * 60_000 }, async () => {
    const deadline = Date.now() + minutes * 60_000;
    const runs: RunResult[] = [];
    const errors: string[] = [];
    for (let i = 0; ; i++) {
      const scenario = scenarios[i % scenarios.length]!;
      const seed = replay !== undefined ? baseSeed : baseSeed + Math.floor(i / scenarios.length);
      try {
        const run = await runFaultScenario({
          seed,
          scenario,
          faults: Number(process.env.SOAK_FAULTS ?? 12),
          maxFaultMs: Number(process.env.SOAK_MAX_FAULT_MS ?? 25_000),
          backlog: 3000,
          rate: 30,
          drainMs: 40_000,
          gapMs: [200, 2500],
          log: process.env.FAULT_VERBOSE ? (l) => console.log(l) : undefined,
        });
        runs.push(run);
        const c = Object.entries(run.result.counts).filter(([, n]) => n > 0);
        console.log(
          `${scenario} seed ${seed}: ${(run.durationMs / 1000).toFixed(0)} s, faults ${Object.entries(
            run.injected,
          )
            .map(([k, n]) => `${k}×${n}`)
            .join(' ')}; anomalies ${c.length ? c.map(([k, n]) => `${k} ${n}`).join(', ') : 'none'}`,
        );
        if (c.length) console.log(run.report());
      } catch (err) {
        errors.push(`${scenario} seed ${seed}: ${(err as Error).stack ?? String(err)}`);
        console.log(`${scenario} seed ${seed}: run failed: ${(err as Error).message}`);
      }
      if (replay !== undefined && i + 1 >= scenarios.length) break;
      if (Date.now() >= deadline) break;
    }

    const injected = new Map<string, number>();
    const anomalies = new Map<string, number>();
    const copies = new Map<string, number>();
    const exits = new Map<string, number>();
    for (const r of runs) {
      for (const [k, n] of Object.entries(r.injected)) injected.set(k, (injected.get(k) ?? 0) + n!);
      for (const [k, n] of Object.entries(r.result.counts)) anomalies.set(k, (anomalies.get(k) ?? 0) + n);
      for (const [k, n] of Object.entries(r.result.copies)) copies.set(k, (copies.get(k) ?? 0) + n!);
      for (const [k, n] of Object.entries(r.exits))
        exits.set(`${r.scenario} ${k}`, (exits.get(`${r.scenario} ${k}`) ?? 0) + n);
    }
    const failed = runs.filter((r) => r.result.anomalies.length > 0);
    const perScenario = scenarios
      .map(
        (s) =>
          `${s}: ${runs.filter((r) => r.scenario === s).length} runs, ${failed.filter((r) => r.scenario === s).length} with anomalies`,
      )
      .join('; ');
    const summary = [
      `fault soak: ${runs.length} runs in ${minutes} min (${perScenario})`,
      table(
        FAULT_KINDS.map((k) => [k, injected.get(k) ?? 0]),
        ['fault kind', 'injected'],
      ),
      table(
        ANOMALY_KINDS.map((k) => [
          k,
          `${anomalies.get(k) ?? 0} (in ${runs.filter((r) => r.result.counts[k] > 0).length} runs)`,
        ]),
        ['anomaly kind', 'count'],
      ),
      table(
        [...exits].sort((a, b) => b[1] - a[1]).map(([k, n]) => [k.slice(0, 160), n]),
        ['processes exiting by themselves', 'count'],
      ),
      table(
        [...copies].map(([k, n]) => [k, n]),
        ['copies explained by', 'count'],
      ),
      `failed seeds: ${
        failed
          .map(
            (r) =>
              `${r.scenario} ${r.seed} (${Object.entries(r.result.counts)
                .filter(([, n]) => n > 0)
                .map(([k, n]) => `${k} ${n}`)
                .join(', ')})`,
          )
          .join('; ') || 'none'
      }`,
      ...(errors.length ? [`runs that could not complete:\n${errors.join('\n')}`] : []),
    ].join('\n');
    console.log(summary);
    expect(errors, summary).toEqual([]);
    expect(
      failed.map((r) => `${r.scenario} ${r.seed}`),
      summary,
    ).toEqual([]);
  });
});
