// The Grafana dashboard and the Prometheus rules ship as files: check that they are valid and that
// every metric they use is really exported (the alerts' behaviour is tested in alerts.test.ts).
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { metricFamilies } from './prom-text.js';
import { promtool } from './promtool.js';
import { startStack } from './stack.js';

const RULES = resolve('helm/feedsync/rules/feedsync.rules.yaml');
const DASHBOARD = resolve('helm/feedsync/dashboards/feedsync.json');

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
    expect(check.output).toContain('SUCCESS: 11 rules found');
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

  it('is a Grafana dashboard with datasource, source and sink variables and the required panels', () => {
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36);
    const vars = Object.fromEntries(dashboard.templating.list.map((v) => [v.name, v.type]));
    expect(vars).toMatchObject({ datasource: 'datasource', source: 'query', sink: 'query' });
    const queryPanels = dashboard.panels.filter((p) => p.type !== 'row');
    for (const panel of queryPanels) {
      expect(panel.datasource?.uid, panel.title).toBe('${datasource}');
      expect(panel.targets?.length, panel.title).toBeGreaterThan(0);
    }
    expect(dashboard.panels.filter((p) => p.type === 'row').map((p) => p.title)).toContain(
      'Sinks: positions',
    );
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
      // The "Sinks: positions" row: state, lag in events and seconds, queued, lost upstream.
      'feedsync_sink_state{state="parked"',
      'max by (source, sink) (feedsync_sink_lag_events',
      'max by (source, sink) (feedsync_sink_lag_seconds',
      'feedsync_queue_jobs{state=~"waiting|active|delayed"',
      'max by (source, sink) (feedsync_sink_lost_upstream',
    ]) {
      expect(exprs).toContain(needle);
    }
  });
});
