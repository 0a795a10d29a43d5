// helm/feedsync/README.md's parameters table is generated from the `## @param` comments of
// values.yaml by @bitnami/readme-generator-for-helm. Regenerate it into a temporary copy and
// compare, so a value added, renamed or re-described without regenerating fails here.
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { repoRoot } from './helm-support.js';

const chartDir = join(repoRoot, 'helm/feedsync');
const generator = join(
  dirname(createRequire(import.meta.url).resolve('@bitnami/readme-generator-for-helm/package.json')),
  'bin/index.js',
);
const work = mkdtempSync(join(tmpdir(), 'feedsync-chart-readme-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

function generate(values: string, readme: string) {
  const r = spawnSync(process.execPath, [generator, '--values', values, '--readme', readme], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { code: r.status, output: `${r.stdout}${r.stderr}` };
}

describe('chart README', () => {
  it('has the parameters table readme-generator makes from values.yaml', () => {
    const values = join(work, 'values.yaml');
    const readme = join(work, 'README.md');
    copyFileSync(join(chartDir, 'values.yaml'), values);
    copyFileSync(join(chartDir, 'README.md'), readme);
    const run = generate(values, readme);
    expect(run.code, run.output).toBe(0);
    expect(
      readFileSync(join(chartDir, 'README.md'), 'utf8'),
      'helm/feedsync/README.md is stale: run ' +
        '`npx readme-generator -v helm/feedsync/values.yaml -r helm/feedsync/README.md`',
    ).toBe(readFileSync(readme, 'utf8'));
  });

  it('documents every value (the generator refuses undocumented ones)', () => {
    const values = join(work, 'undocumented.yaml');
    const readme = join(work, 'README-undocumented.md');
    writeFileSync(values, `${readFileSync(join(chartDir, 'values.yaml'), 'utf8')}\nundocumentedValue: 1\n`);
    copyFileSync(join(chartDir, 'README.md'), readme);
    const run = generate(values, readme);
    expect(run.code).not.toBe(0);
    expect(run.output).toContain('Missing metadata for key: undocumentedValue');
  });

  it('lists the scaled-mode, KEDA, pod customisation and test values', () => {
    const text = readFileSync(join(chartDir, 'README.md'), 'utf8');
    for (const key of [
      'global',
      'poller.replicas',
      'poller.podDisruptionBudget.minAvailable',
      'worker.autoscaling.keda.enabled',
      'extraVolumes',
      'extraVolumeMounts',
      'initContainers',
      'extraEnv',
      'envFrom',
      'affinity',
      'topologySpreadConstraints',
      'priorityClassName',
      'serviceAccount.annotations',
      'podSecurityContext.runAsUser',
      'livenessProbe.periodSeconds',
      'metrics.prometheusRule.runbookBaseUrl',
      'tests.enabled',
    ]) {
      expect(text).toContain(`| \`${key}\``);
    }
  });
});
