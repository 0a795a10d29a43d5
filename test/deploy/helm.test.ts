// The Helm chart, rendered by the real helm binary and checked object by object.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import {
  createChartSandbox,
  fetchHelm,
  keyPaths,
  mainContainer,
  one,
  ofKind,
  renderedConfig,
  replicasRunning,
  validateAgainstKubernetes,
  workloads,
  type ChartSandbox,
  type K8sObject,
} from './helm-support.js';

// Distinctive so that a leak anywhere in a ConfigMap or annotation is unmistakable.
const SECRETS = {
  'scheduling-password': 'SchedPw-7f3Kq9-LEAKCHECK',
  'workflow-password': 'WfPw-2m8Zr4-LEAKCHECK',
  'hook-secret': 'HookSecret-9x1Vb6-LEAKCHECK',
};
const REDIS_URL = 'redis://:RedisPw-5t7Hn2-LEAKCHECK@redis.cache.svc:6379/0';
const SECRET_VALUES = [...Object.values(SECRETS), REDIS_URL, 'RedisPw-5t7Hn2-LEAKCHECK'];
const SECRETS_DIR = '/etc/feedsync/secrets/';

let chart: ChartSandbox;

beforeAll(() => {
  fetchHelm();
  chart = createChartSandbox();
});
afterAll(() => chart?.cleanup());

function lintStrict(valuesFiles: string[], extra: string[] = []) {
  return chart.helm(['lint', '--strict', chart.chartDir, ...valuesFiles.flatMap((f) => ['-f', f]), ...extra]);
}

/** Checks every chart guarantees on any successful render. */
function assertCommonInvariants(objects: K8sObject[]): void {
  const validated = validateAgainstKubernetes(objects);
  expect(validated.length).toBeGreaterThan(0);

  expect(workloads(objects).length).toBeGreaterThan(0);
  for (const w of workloads(objects)) {
    const pod = w.spec.template.spec;
    const where = `${w.kind} ${w.metadata.name}`;
    expect(pod.securityContext, where).toMatchObject({
      runAsNonRoot: true,
      runAsUser: 10001,
      runAsGroup: 10001,
      fsGroup: 10001,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    expect(pod.automountServiceAccountToken, where).toBe(false);
    for (const c of [...pod.containers, ...(pod.initContainers ?? [])]) {
      expect(c.securityContext, `${where} container ${c.name}`).toMatchObject({
        readOnlyRootFilesystem: true,
        allowPrivilegeEscalation: false,
        capabilities: { drop: ['ALL'] },
        seccompProfile: { type: 'RuntimeDefault' },
      });
    }
    const c = mainContainer(w);
    expect(c.ports, where).toContainEqual(expect.objectContaining({ name: 'metrics', containerPort: 9464 }));
    expect(c.livenessProbe.httpGet, where).toEqual({ path: '/healthz', port: 'metrics' });
    expect(c.readinessProbe.httpGet, where).toEqual({ path: '/readyz', port: 'metrics' });
    expect(c.startupProbe.httpGet, where).toEqual({ path: '/healthz', port: 'metrics' });
    // With a read-only root, /tmp must be a writable volume.
    const tmp = c.volumeMounts.find((m: any) => m.mountPath === '/tmp');
    expect(pod.volumes.find((v: any) => v.name === tmp?.name)?.emptyDir, where).toBeDefined();
    expect(
      c.volumeMounts.map((m: any) => m.mountPath),
      where,
    ).toContain('/etc/feedsync/feedsync.yaml');
    expect(w.spec.template.metadata.annotations['checksum/config'], where).toMatch(/^[a-f0-9]{64}$/);
    expect(w.spec.template.metadata.annotations['checksum/secret'], where).toMatch(/^[a-f0-9]{64}$/);
    expect(pod.terminationGracePeriodSeconds, where).toBeGreaterThan(
      renderedConfig(objects).config.shutdown_timeout_ms / 1000,
    );
  }

  // Never more than one process polling a feed.
  expect(replicasRunning(objects, 'run') + replicasRunning(objects, 'poll')).toBe(1);

  for (const cm of ofKind(objects, 'ConfigMap')) {
    const text = JSON.stringify(cm);
    for (const secret of SECRET_VALUES) expect(text, `ConfigMap ${cm.metadata.name}`).not.toContain(secret);
  }
  for (const w of workloads(objects)) {
    const text = JSON.stringify(w);
    for (const secret of SECRET_VALUES) expect(text, `${w.kind} ${w.metadata.name}`).not.toContain(secret);
  }

  const { config } = renderedConfig(objects);
  expect(keyPaths(config, new Set(['password', 'secret', 'redis_url']))).toEqual([]);
  const fileRefs = keyPaths(config, new Set(['password_file', 'secret_file', 'redis_url_file']));
  expect(fileRefs.length).toBeGreaterThan(0);
  for (const path of fileRefs) {
    const value = path
      .slice(1)
      .split(/\.|\[(\d+)\]/)
      .filter((p) => p !== undefined && p !== '')
      .reduce((acc: any, key) => acc[key], config);
    expect(value, path).toMatch(new RegExp(`^${SECRETS_DIR}[A-Za-z0-9._-]+$`));
  }
  expect(config.store).toEqual({ path: '/data/feedsync.db' });
  expect(config.http).toEqual({ host: '0.0.0.0', port: 9464 });

  const metrics = ofKind(objects, 'Service').find((s) => s.metadata.name.endsWith('-metrics'));
  expect(metrics?.spec.ports).toContainEqual(
    expect.objectContaining({ name: 'metrics', targetPort: 'metrics' }),
  );
  expect(metrics?.metadata.annotations).toEqual({
    'prometheus.io/scrape': 'true',
    'prometheus.io/port': '9464',
    'prometheus.io/path': '/metrics',
  });
}

/** Every file the secrets volume projects, when the chart knows the keys. */
function projectedFiles(workload: K8sObject): string[] {
  const volume = workload.spec.template.spec.volumes.find((v: any) => v.name === 'secrets');
  return (volume?.projected.sources ?? []).flatMap((s: any) =>
    (s.secret.items ?? []).map((i: any) => i.path),
  );
}

describe('helm chart: defaults (mode single)', () => {
  it('passes helm lint --strict', () => {
    const r = lintStrict([]);
    expect(r.code, r.stdout + r.stderr).toBe(0);
  });

  it('renders one `feedsync run` StatefulSet with a volume for the store', () => {
    const objects = chart.render();
    assertCommonInvariants(objects);
    const sts = one(objects, 'StatefulSet');
    expect(sts.spec.replicas).toBe(1);
    expect(mainContainer(sts).args).toEqual(['run']);
    expect(sts.spec.volumeClaimTemplates.map((t: any) => t.metadata.name)).toEqual(['data']);
    expect(mainContainer(sts).volumeMounts).toContainEqual(
      expect.objectContaining({ name: 'data', mountPath: '/data' }),
    );
    expect(ofKind(objects, 'Deployment')).toEqual([]);
    expect(ofKind(objects, 'HorizontalPodAutoscaler')).toEqual([]);
    expect(ofKind(objects, 'ServiceMonitor')).toEqual([]);
    expect(ofKind(objects, 'PrometheusRule')).toEqual([]);
    const { config } = renderedConfig(objects);
    expect(config.queue.driver).toBe('local');
    expect(config.queue.redis_url_file).toBeUndefined();
    expect(sts.spec.template.spec.terminationGracePeriodSeconds).toBe(10000 / 1000 + 5);
  });

  it('derives terminationGracePeriodSeconds from shutdown_timeout_ms', () => {
    const objects = chart.render(['--set', 'config.shutdown_timeout_ms=30000']);
    expect(one(objects, 'StatefulSet').spec.template.spec.terminationGracePeriodSeconds).toBe(35);
  });
});

describe('helm chart: mode scaled with autoscaling and chart-managed secrets', () => {
  const values = () => ({
    mode: 'scaled',
    redis: { url: REDIS_URL },
    secrets: { values: SECRETS },
    worker: { autoscaling: { enabled: true, minReplicas: 3, maxReplicas: 7 } },
  });

  it('passes helm lint --strict', () => {
    const r = lintStrict([chart.valuesFile('scaled.yaml', values())]);
    expect(r.code, r.stdout + r.stderr).toBe(0);
  });

  it('renders a singleton poller, autoscaled workers, a PDB and the Secret', () => {
    const objects = chart.render(['-f', chart.valuesFile('scaled.yaml', values())]);
    assertCommonInvariants(objects);

    const poller = one(objects, 'StatefulSet');
    expect(poller.spec.replicas).toBe(1);
    expect(mainContainer(poller).args).toEqual(['poll']);
    expect(poller.spec.volumeClaimTemplates).toHaveLength(1);

    const worker = one(objects, 'Deployment');
    expect(mainContainer(worker).args).toEqual(['work']);
    expect(worker.spec.replicas).toBeUndefined(); // the HPA owns the count
    expect(replicasRunning(objects, 'poll')).toBe(1);
    expect(replicasRunning(objects, 'run')).toBe(0);

    const hpa = one(objects, 'HorizontalPodAutoscaler');
    expect(hpa.spec.scaleTargetRef).toEqual({
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      name: worker.metadata.name,
    });
    expect([hpa.spec.minReplicas, hpa.spec.maxReplicas]).toEqual([3, 7]);

    const pdb = one(objects, 'PodDisruptionBudget');
    expect(pdb.spec.selector.matchLabels).toEqual(worker.spec.selector.matchLabels);
    expect(poller.spec.selector.matchLabels).not.toEqual(worker.spec.selector.matchLabels);

    const { config } = renderedConfig(objects);
    expect(config.queue).toMatchObject({ driver: 'bullmq', redis_url_file: `${SECRETS_DIR}redis-url` });

    const secret = one(objects, 'Secret');
    const decoded = Object.fromEntries(
      Object.entries(secret.data as Record<string, string>).map(([k, v]) => [
        k,
        Buffer.from(v, 'base64').toString(),
      ]),
    );
    expect(decoded).toEqual({ ...SECRETS, 'redis-url': REDIS_URL });
    for (const w of [poller, worker]) {
      expect(projectedFiles(w).sort()).toEqual([...Object.keys(SECRETS), 'redis-url'].sort());
      expect(mainContainer(w).volumeMounts).toContainEqual(
        expect.objectContaining({ name: 'secrets', mountPath: '/etc/feedsync/secrets', readOnly: true }),
      );
    }
  });

  it('uses worker.replicas when autoscaling is off', () => {
    const objects = chart.render([
      '-f',
      chart.valuesFile('scaled.yaml', values()),
      '--set',
      'worker.autoscaling.enabled=false',
      '--set',
      'worker.replicas=4',
    ]);
    expect(one(objects, 'Deployment').spec.replicas).toBe(4);
    expect(ofKind(objects, 'HorizontalPodAutoscaler')).toEqual([]);
  });

  it('rolls the pods when the config or a credential changes', () => {
    const base = chart.render(['-f', chart.valuesFile('scaled.yaml', values())]);
    const logChanged = chart.render([
      '-f',
      chart.valuesFile('scaled.yaml', values()),
      '--set',
      'config.log.level=debug',
    ]);
    const pwChanged = chart.render([
      '-f',
      chart.valuesFile('scaled.yaml', values()),
      '--set',
      'secrets.values.hook-secret=another-LEAKCHECK',
    ]);
    const annotations = (objs: K8sObject[]) => one(objs, 'Deployment').spec.template.metadata.annotations;
    expect(annotations(logChanged)['checksum/config']).not.toBe(annotations(base)['checksum/config']);
    expect(annotations(logChanged)['checksum/secret']).toBe(annotations(base)['checksum/secret']);
    expect(annotations(pwChanged)['checksum/secret']).not.toBe(annotations(base)['checksum/secret']);
  });
});

describe('helm chart: monitoring', () => {
  const values = () => ({
    metrics: {
      serviceMonitor: { enabled: true, labels: { release: 'kube-prometheus' } },
      prometheusRule: { enabled: true },
      dashboard: { enabled: true },
    },
  });

  // `helm lint` has no --api-versions flag, so the operator templates are rendered by the
  // `helm template --api-versions` test below; lint still checks the values and the rest.
  it('passes helm lint --strict', () => {
    const r = lintStrict([chart.valuesFile('monitoring.yaml', values())]);
    expect(r.code, r.stdout + r.stderr).toBe(0);
  });

  it('renders ServiceMonitor, PrometheusRule and dashboard from the chart files', () => {
    const objects = chart.render([
      '-f',
      chart.valuesFile('monitoring.yaml', values()),
      '--api-versions',
      'monitoring.coreos.com/v1',
    ]);
    assertCommonInvariants(objects);
    const metricsService = ofKind(objects, 'Service').find((s) => s.metadata.name.endsWith('-metrics'))!;
    const sm = one(objects, 'ServiceMonitor');
    expect(sm.metadata.labels?.release).toBe('kube-prometheus');
    expect(sm.spec.endpoints).toEqual([expect.objectContaining({ port: 'metrics', path: '/metrics' })]);
    for (const [k, v] of Object.entries(sm.spec.selector.matchLabels as Record<string, string>)) {
      expect(metricsService.metadata.labels?.[k], k).toBe(v);
    }

    const rulesFile = parse(readFileSync(join(chart.chartDir, 'rules/feedsync.rules.yaml'), 'utf8'));
    expect(one(objects, 'PrometheusRule').spec.groups).toEqual(rulesFile.groups);

    const dashboard = ofKind(objects, 'ConfigMap').find((c) => c.metadata.labels?.grafana_dashboard === '1');
    const dashboardFile = JSON.parse(readFileSync(join(chart.chartDir, 'dashboards/feedsync.json'), 'utf8'));
    expect(JSON.parse(dashboard?.data['feedsync.json'])).toEqual(dashboardFile);
  });

  it('skips the operator objects when the cluster lacks monitoring.coreos.com/v1', () => {
    const objects = chart.render(['-f', chart.valuesFile('monitoring.yaml', values())]);
    expect(ofKind(objects, 'ServiceMonitor')).toEqual([]);
    expect(ofKind(objects, 'PrometheusRule')).toEqual([]);
  });
});

describe('helm chart: existing secrets', () => {
  const values = () => ({
    mode: 'scaled',
    secrets: { existingSecret: 'feedsync-credentials' },
    redis: { existingSecret: 'redis-auth', existingSecretKey: 'url' },
  });

  it('passes helm lint --strict', () => {
    const r = lintStrict([chart.valuesFile('existing.yaml', values())]);
    expect(r.code, r.stdout + r.stderr).toBe(0);
  });

  it('mounts the named Secrets and renders none of its own', () => {
    const objects = chart.render(['-f', chart.valuesFile('existing.yaml', values())]);
    assertCommonInvariants(objects);
    expect(ofKind(objects, 'Secret')).toEqual([]);
    for (const w of workloads(objects)) {
      const volume = w.spec.template.spec.volumes.find((v: any) => v.name === 'secrets');
      expect(volume.projected.sources).toEqual([
        { secret: { name: 'feedsync-credentials' } },
        { secret: { name: 'redis-auth', items: [{ key: 'url', path: 'redis-url' }] } },
      ]);
    }
  });
});

describe('helm chart: bad values fail', () => {
  // Schema violations fail both lint and template. Checks done with `fail` in the templates
  // (relations the schema cannot express) fail `helm template`/`install` only: helm lint runs
  // templates in lint mode, where `fail` only logs.
  const cases: Array<[string, unknown, RegExp, 'lint and template' | 'template']> = [
    ['a typo in a chart value', { worker: { replcas: 3 } }, /replcas/, 'lint and template'],
    [
      'a typo inside the feedsync config',
      {
        config: {
          sources: [
            {
              name: 's',
              service: 'scheduling',
              base_url: 'http://x',
              username: 'u',
              password_file: '/etc/feedsync/secrets/p',
              poll_intervall_ms: 5,
            },
          ],
          sinks: [{ name: 'f', type: 'jsonl', path: '/data/c.jsonl' }],
        },
      },
      /poll_intervall_ms/,
      'lint and template',
    ],
    [
      'an inline password in the config',
      {
        config: {
          sources: [
            {
              name: 's',
              service: 'scheduling',
              base_url: 'http://x',
              username: 'u',
              password: 'inline-LEAKCHECK',
              password_file: '/etc/feedsync/secrets/p',
            },
          ],
          sinks: [{ name: 'f', type: 'jsonl', path: '/data/c.jsonl' }],
        },
      },
      /password/,
      'lint and template',
    ],
    [
      'a chart-owned config key',
      { config: { store: { path: '/tmp/x.db' }, sources: [], sinks: [] } },
      /store/,
      'lint and template',
    ],
    ['scaled mode without Redis', { mode: 'scaled' }, /redis\/(url|existingSecret)/, 'lint and template'],
    [
      'a grace period shorter than the shutdown budget',
      { terminationGracePeriodSeconds: 10 },
      /terminationGracePeriodSeconds/,
      'template',
    ],
    [
      'a referenced credential missing from secrets.values',
      { secrets: { values: { 'scheduling-password': 'x' } } },
      /workflow-password/,
      'template',
    ],
  ];

  it.each(cases)('%s', (_label, values, message, failsIn) => {
    const file = chart.valuesFile('bad.yaml', values);
    if (failsIn === 'lint and template') {
      const lint = lintStrict([file]);
      expect(lint.code, lint.stdout).not.toBe(0);
      expect(lint.stdout + lint.stderr).toMatch(message);
    }
    const template = chart.helm(['template', 'fs', chart.chartDir, '-f', file]);
    expect(template.code).not.toBe(0);
    expect(template.stderr).toMatch(message);
    expect(template.stderr).not.toContain('LEAKCHECK');
  });
});
