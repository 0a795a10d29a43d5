// The alerting rules are code: promtool runs their unit tests (alerts.promtool.yaml), and every
// alert must have a case that fires it and one that does not, and a runbook that exists.
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { promtool } from './promtool.js';

const RULES = resolve('helm/feedsync/rules/feedsync.rules.yaml');
const UNIT_TESTS = resolve('test/observability/alerts.promtool.yaml');
const RUNBOOKS = resolve('docs/runbooks.md');
const VALUES = resolve('helm/feedsync/values.yaml');

interface Rule {
  alert: string;
  expr: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface AlertCase {
  eval_time: string;
  alertname: string;
  exp_alerts?: unknown[];
}

const rules = (parseYaml(readFileSync(RULES, 'utf8')) as { groups: { rules: Rule[] }[] }).groups.flatMap(
  (g) => g.rules,
);
const unitTests = parseYaml(readFileSync(UNIT_TESTS, 'utf8')) as {
  rule_files: string[];
  tests: { alert_rule_test?: AlertCase[] }[];
};
const cases = unitTests.tests.flatMap((t) => t.alert_rule_test ?? []);

/** GitHub's heading anchor: lower case, spaces to dashes, punctuation dropped. */
function anchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^a-z0-9 _-]/g, '')
    .replace(/ /g, '-');
}

describe('alerting rules', () => {
  it('pass their promtool unit tests', () => {
    expect(unitTests.rule_files).toEqual(['../../helm/feedsync/rules/feedsync.rules.yaml']);
    const run = promtool(['test', 'rules', UNIT_TESTS]);
    expect(run.output).toContain('SUCCESS');
    expect(run.code, run.output).toBe(0);
  });

  it('are the expected alerts, each with severity, summary and description', () => {
    expect(rules.map((r) => r.alert).sort()).toEqual([
      'FeedsyncBacklogGrowing',
      'FeedsyncDeadLettersGrowing',
      'FeedsyncDeliveryErrorRatioHigh',
      'FeedsyncDown',
      'FeedsyncRedisMisconfigured',
      'FeedsyncRedisUnreachable',
      'FeedsyncSinkFailing',
      'FeedsyncSinkLostUpstream',
      'FeedsyncSinkParked',
      'FeedsyncSourceBehind',
      'FeedsyncSourceNotPolling',
    ]);
    for (const rule of rules) {
      expect(['critical', 'warning'], rule.alert).toContain(rule.labels?.severity);
      for (const key of ['summary', 'description']) {
        expect(rule.annotations?.[key], `${rule.alert}.${key}`).toBeTruthy();
      }
    }
  });

  it('each have a unit test that fires them and one that does not', () => {
    for (const rule of rules) {
      const mine = cases.filter((c) => c.alertname === rule.alert);
      expect(
        mine.some((c) => (c.exp_alerts ?? []).length > 0),
        `${rule.alert}: no case fires it`,
      ).toBe(true);
      expect(
        mine.some((c) => (c.exp_alerts ?? []).length === 0),
        `${rule.alert}: no case where it stays quiet`,
      ).toBe(true);
    }
    // A case for an alert that no longer exists would pass vacuously.
    for (const c of cases) expect(rules.map((r) => r.alert)).toContain(c.alertname);
  });

  it('link runbooks that exist, under the base URL the chart defaults to', () => {
    const values = parseYaml(readFileSync(VALUES, 'utf8')) as {
      metrics: { prometheusRule: { runbookBaseUrl: string } };
    };
    const base = values.metrics.prometheusRule.runbookBaseUrl;
    expect(base).toMatch(/^https:\/\/.+\/docs\/runbooks\.md$/);
    const anchors = new Set(
      readFileSync(RUNBOOKS, 'utf8')
        .split('\n')
        .filter((line) => line.startsWith('## '))
        .map((line) => anchor(line.slice(3))),
    );
    for (const rule of rules) {
      expect(rule.annotations?.runbook_url, rule.alert).toBe(`${base}#${rule.alert.toLowerCase()}`);
      expect(anchors.has(rule.alert.toLowerCase()), `docs/runbooks.md has no section ${rule.alert}`).toBe(
        true,
      );
    }
  });

  it('never select feedsync by a job or release name', () => {
    for (const rule of rules) {
      expect(rule.expr, rule.alert).not.toMatch(/job\s*=~?/);
      expect(rule.expr, rule.alert).not.toMatch(/absent\(up/);
    }
  });
});
