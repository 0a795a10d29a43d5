// The Grafana dashboard and the Prometheus rules ship as files: check that they are valid, that
// every metric they use is really exported, and that the alert expressions fire when they should.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { metricFamilies } from './prom-text.js';
import { promtool } from './promtool.js';
import { startStack } from './stack.js';

const RULES = resolve('helm/feedsync/rules/feedsync.rules.yaml');
const DASHBOARD = resolve('helm/feedsync/dashboards/feedsync.json');

interface Rule {
  alert: string;
  expr: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
const rules = (parseYaml(readFileSync(RULES, 'utf8')) as { groups: { rules: Rule[] }[] }).groups.flatMap(
  (g) => g.rules,
);
const dashboardText = readFileSync(DASHBOARD, 'utf8');
const dashboard = JSON.parse(dashboardText) as {
  schemaVersion: number;
  templating: { list: { name: string; type: string }[] };
  panels: { type: string; title: string; datasource?: { uid: string }; targets?: { expr: string }[] }[];
};

function referencedMetrics(text: string): Set<string> {
  return new Set(
    [...text.matchAll(/feedsync_[a-z_]+/g)].map((m) => m[0].replace(/_(bucket|sum|count)$/, '')),
  );
}

describe('rules and dashboard', () => {
  let exported: Set<string>;
  beforeAll(async () => {
    const stack = await startStack({
      queueCounts: async () => ({ file: { waiting: 0, active: 0, delayed: 0, failed: 0, dead: 0 } }),
    });
    try {
      stack.events.emit('http:response', { source: 'scheduling', kind: 'feed', code: '200' });
      stack.events.emit('poll:finished', {
        source: 'scheduling',
        ok: true,
        durationSeconds: 0.1,
        pageSize: 1,
        behind: false,
      });
      stack.events.emit('page:committed', {
        source: 'scheduling',
        cursor: 1,
        eventTypes: ['title_created'],
        lastEventTimestamp: 1,
        enqueued: { file: 1 },
        gone: 0,
      });
      exported = new Set(metricFamilies((await stack.get('/metrics')).body).keys());
    } finally {
      await stack.close();
    }
  });

  it('passes promtool check rules', () => {
    const check = promtool(['check', 'rules', RULES]);
    expect(check.output).toContain('SUCCESS: 5 rules found');
    expect(check.code).toBe(0);
  });

  it('uses only metrics that /metrics exports', () => {
    const used = new Set([
      ...referencedMetrics(readFileSync(RULES, 'utf8')),
      ...referencedMetrics(dashboardText),
    ]);
    expect(used.size).toBeGreaterThan(10);
    for (const name of used) expect(exported.has(name), `${name} is referenced but not exported`).toBe(true);
  });

  it('has the required alerts, each with severity, summary, description and runbook', () => {
    expect(rules.map((r) => r.alert).sort()).toEqual([
      'FeedsyncDeadLettersGrowing',
      'FeedsyncDeliveryErrorRatioHigh',
      'FeedsyncDown',
      'FeedsyncSourceBehind',
      'FeedsyncSourceNotPolling',
    ]);
    for (const rule of rules) {
      expect(['critical', 'warning'], rule.alert).toContain(rule.labels?.severity);
      for (const key of ['summary', 'description', 'runbook']) {
        expect(rule.annotations?.[key], `${rule.alert}.${key}`).toBeTruthy();
      }
    }
  });

  it('is a Grafana dashboard with datasource, source and sink variables and the required panels', () => {
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36);
    const vars = Object.fromEntries(dashboard.templating.list.map((v) => [v.name, v.type]));
    expect(vars).toMatchObject({ datasource: 'datasource', source: 'query', sink: 'query' });
    const queryPanels = dashboard.panels.filter((p) => p.type !== 'row');
    for (const panel of queryPanels) {
      expect(panel.datasource?.uid, panel.title).toBe('${datasource}');
      expect(panel.targets?.length, panel.title).toBeGreaterThan(0);
    }
    const exprs = queryPanels.flatMap((p) => (p.targets ?? []).map((t) => t.expr)).join('\n');
    for (const needle of [
      'rate(feedsync_events_total',
      'time() - max by (source) (feedsync_last_event_timestamp_seconds',
      'time() - max by (source) (feedsync_last_successful_poll_timestamp_seconds',
      'feedsync_source_behind',
      'feedsync_polls_total{outcome="error"',
      'feedsync_http_requests_total',
      'feedsync_subject_gone_total',
      'feedsync_deliveries_total{outcome=~"retry|dead"',
      'feedsync_dead_letters',
      'feedsync_queue_jobs',
      'histogram_quantile(0.5, sum by (sink, le) (rate(feedsync_end_to_end_seconds_bucket',
      'histogram_quantile(0.99, sum by (sink, le) (rate(feedsync_end_to_end_seconds_bucket',
    ]) {
      expect(exprs).toContain(needle);
    }
  });

  describe('alert expressions (promtool test rules)', () => {
    let dir: string;
    beforeAll(() => {
      dir = mkdtempSync(join(tmpdir(), 'feedsync-rules-'));
    });
    afterAll(() => rmSync(dir, { recursive: true, force: true }));

    const expr = (alert: string) => {
      const rule = rules.find((r) => r.alert === alert);
      if (!rule) throw new Error(`no alert ${alert}`);
      return rule.expr;
    };
    const T = 'instance="a", job="feedsync"';

    it('fire on exactly the series they should', () => {
      const spec = {
        evaluation_interval: '1m',
        tests: [
          {
            interval: '1m',
            input_series: [
              // scheduling succeeded once at t=0 and never again; workflow never succeeded.
              {
                series: `feedsync_last_successful_poll_timestamp_seconds{source="scheduling", ${T}}`,
                values: '0x20',
              },
              { series: `feedsync_polls_total{outcome="ok", source="scheduling", ${T}}`, values: '1x20' },
              { series: `feedsync_polls_total{outcome="ok", source="workflow", ${T}}`, values: '0x20' },
              { series: `process_start_time_seconds{${T}}`, values: '0x20' },
              { series: `feedsync_source_behind{source="scheduling", ${T}}`, values: '1x20' },
              { series: `feedsync_source_behind{source="workflow", ${T}}`, values: '0x20' },
              { series: `feedsync_dead_letters{sink="hook", ${T}}`, values: '0 0 0 1 2 2 2 2 2 2 2' },
              { series: `feedsync_dead_letters{sink="file", ${T}}`, values: '3x10' },
              // hook: 20 failed of 120 attempts per 10 min (16.7 %); file: 100 % failing but only 10 attempts.
              { series: `feedsync_deliveries_total{outcome="ok", sink="hook", ${T}}`, values: '0+10x20' },
              { series: `feedsync_deliveries_total{outcome="retry", sink="hook", ${T}}`, values: '0+2x20' },
              { series: `feedsync_deliveries_total{outcome="dead", sink="hook", ${T}}`, values: '0x20' },
              { series: `feedsync_deliveries_total{outcome="ok", sink="file", ${T}}`, values: '0x20' },
              { series: `feedsync_deliveries_total{outcome="retry", sink="file", ${T}}`, values: '0+1x20' },
              { series: `feedsync_deliveries_total{outcome="dead", sink="file", ${T}}`, values: '0x20' },
            ],
            promql_expr_test: [
              { expr: expr('FeedsyncSourceNotPolling'), eval_time: '5m', exp_samples: [] },
              {
                expr: expr('FeedsyncSourceNotPolling'),
                eval_time: '11m',
                exp_samples: [
                  { labels: `{source="scheduling", ${T}}`, value: 660 },
                  { labels: `{source="workflow", ${T}}`, value: 0 },
                ],
              },
              {
                expr: expr('FeedsyncSourceBehind'),
                eval_time: '10m',
                exp_samples: [{ labels: `feedsync_source_behind{source="scheduling", ${T}}`, value: 1 }],
              },
              {
                expr: expr('FeedsyncDeadLettersGrowing'),
                eval_time: '10m',
                // delta() extrapolates over the 15 m window: 2 observed over 10 m of data → 2.1.
                exp_samples: [{ labels: `{sink="hook", ${T}}`, value: 2.1 }],
              },
              {
                expr: expr('FeedsyncDeliveryErrorRatioHigh'),
                eval_time: '15m',
                exp_samples: [{ labels: `{job="feedsync", sink="hook"}`, value: 20 / 120 }],
              },
            ],
          },
        ],
      };
      writeFileSync(join(dir, 'feedsync.rules.yaml'), readFileSync(RULES));
      const testFile = join(dir, 'test.yaml');
      writeFileSync(testFile, stringifyYaml({ rule_files: ['feedsync.rules.yaml'], ...spec }));
      const run = promtool(['test', 'rules', testFile]);
      expect(run.output).toContain('SUCCESS');
      expect(run.code).toBe(0);
    });
  });
});
