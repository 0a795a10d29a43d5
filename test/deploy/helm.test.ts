// The Helm chart, rendered by the real helm binary and checked object by object.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
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
  workloadRunning,
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

  // Single mode: exactly one `run` (the SQLite store has one writer). Scaled mode: any number of
  // `poll` replicas (sources are leased in Redis), no `run`.
  const runs = replicasRunning(objects, 'run');
  const polls = replicasRunning(objects, 'poll');
  expect(runs === 1 ? polls : runs, 'run and poll replicas').toBe(0);
  expect(runs + polls).toBeGreaterThanOrEqual(1);

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
  if (config.queue.driver === 'bullmq') {
    // Scaled mode keeps the pollers' state in Redis: no store, and no volume for poll.
    expect(config.store).toBeUndefined();
    const poll = workloadRunning(objects, 'poll');
    expect(poll.kind).toBe('Deployment');
    expect(poll.spec.volumeClaimTemplates).toBeUndefined();
    expect(mainContainer(poll).volumeMounts.map((m: any) => m.mountPath)).not.toContain('/data');
    expect(ofKind(objects, 'PersistentVolumeClaim')).toEqual([]);
  } else {
    expect(config.store).toEqual({ path: '/data/feedsync.db' });
  }
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

  it('renders standby pollers without a volume, autoscaled workers, PDBs and the Secret', () => {
    const objects = chart.render(['-f', chart.valuesFile('scaled.yaml', values())]);
    assertCommonInvariants(objects);
    expect(ofKind(objects, 'StatefulSet')).toEqual([]);

    const poller = workloadRunning(objects, 'poll');
    expect(poller.kind).toBe('Deployment');
    expect(poller.spec.replicas).toBe(2);
    expect(poller.spec.template.spec.volumes.map((v: any) => v.name)).not.toContain('data');
    // Spread across nodes, so a node failure leaves a standby.
    expect(poller.spec.template.spec.topologySpreadConstraints).toEqual([
      {
        maxSkew: 1,
        topologyKey: 'kubernetes.io/hostname',
        whenUnsatisfiable: 'ScheduleAnyway',
        labelSelector: { matchLabels: poller.spec.selector.matchLabels },
      },
    ]);

    const worker = workloadRunning(objects, 'work');
    expect(worker.kind).toBe('Deployment');
    expect(worker.spec.replicas).toBeUndefined(); // the HPA owns the count
    expect(worker.spec.template.spec.topologySpreadConstraints).toBeUndefined();
    expect(replicasRunning(objects, 'poll')).toBe(2);
    expect(replicasRunning(objects, 'run')).toBe(0);

    const hpa = one(objects, 'HorizontalPodAutoscaler');
    expect(hpa.spec.scaleTargetRef).toEqual({
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      name: worker.metadata.name,
    });
    expect([hpa.spec.minReplicas, hpa.spec.maxReplicas]).toEqual([3, 7]);
    expect(ofKind(objects, 'ScaledObject')).toEqual([]);

    const pdbs = ofKind(objects, 'PodDisruptionBudget');
    expect(pdbs).toHaveLength(2);
    const pollPdb = pdbs.find((p) => p.metadata.name.endsWith('-poll'))!;
    expect(pollPdb.spec).toEqual({
      minAvailable: 1,
      selector: { matchLabels: poller.spec.selector.matchLabels },
    });
    const workPdb = pdbs.find((p) => p.metadata.name.endsWith('-work'))!;
    expect(workPdb.spec.selector.matchLabels).toEqual(worker.spec.selector.matchLabels);
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
    expect(workloadRunning(objects, 'work').spec.replicas).toBe(4);
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
    const annotations = (objs: K8sObject[]) =>
      workloadRunning(objs, 'work').spec.template.metadata.annotations;
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

  it('points every runbook_url at metrics.prometheusRule.runbookBaseUrl, keeping the anchors', () => {
    const objects = chart.render([
      '-f',
      chart.valuesFile('monitoring.yaml', values()),
      '--set',
      'metrics.prometheusRule.runbookBaseUrl=https://wiki.example.com/ops/feedsync',
      '--api-versions',
      'monitoring.coreos.com/v1',
    ]);
    const rulesFile = parse(readFileSync(join(chart.chartDir, 'rules/feedsync.rules.yaml'), 'utf8'));
    const rendered = one(objects, 'PrometheusRule').spec.groups[0].rules as any[];
    expect(rendered.map((r) => r.alert)).toEqual(rulesFile.groups[0].rules.map((r: any) => r.alert));
    for (const [i, rule] of rendered.entries()) {
      const fromFile = rulesFile.groups[0].rules[i];
      expect(rule.annotations.runbook_url).toBe(
        `https://wiki.example.com/ops/feedsync#${rule.alert.toLowerCase()}`,
      );
      // Everything else is the file's, unchanged.
      expect({ ...rule, annotations: { ...rule.annotations, runbook_url: undefined } }).toEqual({
        ...fromFile,
        annotations: { ...fromFile.annotations, runbook_url: undefined },
      });
    }
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

describe('helm chart: Redis topologies, TLS and durability', () => {
  const REDIS_PW = 'RedisPw-9q2Lm@:/+ x-LEAKCHECK';
  const REDIS_PW_ENCODED = 'RedisPw-9q2Lm%40%3A%2F%2B%20x-LEAKCHECK';
  const base = (redis: Record<string, unknown>) => ({ mode: 'scaled', secrets: { values: SECRETS }, redis });

  function secretData(objects: K8sObject[]): Record<string, string> {
    const secret = one(objects, 'Secret');
    return Object.fromEntries(
      Object.entries(secret.data as Record<string, string>).map(([k, v]) => [
        k,
        Buffer.from(v, 'base64').toString(),
      ]),
    );
  }

  function assertNoRedisPassword(objects: K8sObject[]): void {
    for (const o of [...ofKind(objects, 'ConfigMap'), ...workloads(objects)]) {
      const text = JSON.stringify(o);
      expect(text, `${o.kind} ${o.metadata.name}`).not.toContain('LEAKCHECK');
    }
  }

  it('builds a redis+sentinel:// URL from redis.sentinel, with the credentials percent-encoded', () => {
    const values = base({
      username: 'feedsync',
      password: REDIS_PW,
      sentinel: { masterName: 'mymaster', sentinels: ['sentinel-a:26379', 'sentinel-b:26379'] },
    });
    const file = chart.valuesFile('sentinel.yaml', values);
    const lint = lintStrict([file]);
    expect(lint.code, lint.stdout + lint.stderr).toBe(0);
    const objects = chart.render(['-f', file]);
    assertCommonInvariants(objects);
    assertNoRedisPassword(objects);
    expect(secretData(objects)['redis-url']).toBe(
      `redis+sentinel://feedsync:${REDIS_PW_ENCODED}@sentinel-a:26379,sentinel-b:26379/mymaster`,
    );
    // What feedsync decodes is the password as given.
    expect(decodeURIComponent(REDIS_PW_ENCODED)).toBe(REDIS_PW);
    const { config } = renderedConfig(objects);
    expect(config.queue).toMatchObject({ driver: 'bullmq', redis_url_file: `${SECRETS_DIR}redis-url` });
    expect(config.queue.redis_tls).toBeUndefined();
    expect(config.queue.min_replicas_acked).toBeUndefined();
    for (const w of [workloadRunning(objects, 'poll'), workloadRunning(objects, 'work')]) {
      expect(projectedFiles(w)).toContain('redis-url');
      expect(w.spec.template.spec.volumes.map((v: any) => v.name)).not.toContain('redis-tls');
    }
  });

  it('builds rediss+sentinel:// with redis.tls and mounts the CA', () => {
    const values = base({
      sentinel: { masterName: 'mymaster', sentinels: ['sentinel-a:26379'] },
      tls: { enabled: true, existingSecret: 'redis-tls' },
    });
    const objects = chart.render(['-f', chart.valuesFile('sentinel-tls.yaml', values)]);
    assertCommonInvariants(objects);
    expect(secretData(objects)['redis-url']).toBe('rediss+sentinel://sentinel-a:26379/mymaster');
    expect(renderedConfig(objects).config.queue.redis_tls).toMatchObject({
      ca_file: expect.stringMatching(/ca\.crt$/),
    });
  });

  it("stores the sentinels' own password in the Secret and points queue.redis_sentinel_password_file at it", () => {
    const values = base({
      sentinel: { masterName: 'mymaster', password: 'LEAKCHECK-sentinel', sentinels: ['sentinel-a:26379'] },
    });
    const objects = chart.render(['-f', chart.valuesFile('sentinel-pw.yaml', values)]);
    assertCommonInvariants(objects);
    assertNoRedisPassword(objects);
    expect(secretData(objects)['redis-sentinel-password']).toBe('LEAKCHECK-sentinel');
    const { config } = renderedConfig(objects);
    expect(config.queue.redis_sentinel_password_file).toBe(`${SECRETS_DIR}redis-sentinel-password`);
    for (const w of [workloadRunning(objects, 'poll'), workloadRunning(objects, 'work')])
      expect(projectedFiles(w)).toContain('redis-sentinel-password');
    const alone = chart.valuesFile(
      'sentinel-pw-alone.yaml',
      base({ url: 'redis://h:6379', sentinel: { password: 'x' } }),
    );
    const template = chart.helm(['template', 'fs', chart.chartDir, '-f', alone]);
    expect(template.code).not.toBe(0);
    expect(template.stderr).toMatch(
      /redis\.sentinel\.password is set but redis\.sentinel\.sentinels is empty/,
    );
  });

  describe('Redis Cluster over TLS with a private CA and a client certificate', () => {
    const values = () =>
      base({
        password: REDIS_PW,
        cluster: { nodes: ['clustercfg.feedsync.example.invalid:6379', '10.0.0.7:6379'] },
        tls: {
          enabled: true,
          existingSecret: 'redis-tls',
          caKey: 'ca.pem',
          certKey: 'client.pem',
          keyKey: 'client-key.pem',
          servername: 'redis.internal',
        },
        minReplicasAcked: 1,
      });

    it('passes helm lint --strict', () => {
      const r = lintStrict([chart.valuesFile('cluster.yaml', values())]);
      expect(r.code, r.stdout + r.stderr).toBe(0);
    });

    it('stores a rediss+cluster:// URL and mounts the TLS Secret where queue.redis_tls points', () => {
      const objects = chart.render(['-f', chart.valuesFile('cluster.yaml', values())]);
      assertCommonInvariants(objects);
      assertNoRedisPassword(objects);
      expect(secretData(objects)['redis-url']).toBe(
        `rediss+cluster://:${REDIS_PW_ENCODED}@clustercfg.feedsync.example.invalid:6379,10.0.0.7:6379`,
      );
      const { config } = renderedConfig(objects);
      expect(config.queue.redis_tls).toEqual({
        ca_file: '/etc/feedsync/redis-tls/ca.crt',
        cert_file: '/etc/feedsync/redis-tls/tls.crt',
        key_file: '/etc/feedsync/redis-tls/tls.key',
        servername: 'redis.internal',
      });
      expect(config.queue.min_replicas_acked).toBe(1);

      for (const w of [workloadRunning(objects, 'poll'), workloadRunning(objects, 'work')]) {
        const where = `${w.kind} ${w.metadata.name}`;
        const volume = w.spec.template.spec.volumes.find((v: any) => v.name === 'redis-tls');
        expect(volume, where).toEqual({
          name: 'redis-tls',
          secret: {
            secretName: 'redis-tls',
            // The credentials' mode (0440 in the template: YAML 1.1 octal for Kubernetes).
            defaultMode: w.spec.template.spec.volumes.find((v: any) => v.name === 'secrets').projected
              .defaultMode,
            items: [
              { key: 'ca.pem', path: 'ca.crt' },
              { key: 'client.pem', path: 'tls.crt' },
              { key: 'client-key.pem', path: 'tls.key' },
            ],
          },
        });
        const mount = mainContainer(w).volumeMounts.find((m: any) => m.name === 'redis-tls');
        expect(mount, where).toEqual({
          name: 'redis-tls',
          mountPath: '/etc/feedsync/redis-tls',
          readOnly: true,
        });
        // Every path queue.redis_tls names is a file of that mount.
        for (const path of ['ca_file', 'cert_file', 'key_file'].map((k) => config.queue.redis_tls[k])) {
          const file = path.slice(`${mount.mountPath}/`.length);
          expect(path.startsWith(`${mount.mountPath}/`), path).toBe(true);
          expect(
            volume.secret.items.map((i: any) => i.path),
            path,
          ).toContain(file);
        }
      }
    });

    it('leaves out the client certificate unless certKey and keyKey are set', () => {
      const v = values();
      v.redis.tls = { enabled: true, existingSecret: 'redis-tls' };
      const objects = chart.render(['-f', chart.valuesFile('cluster-ca.yaml', v)]);
      const { config } = renderedConfig(objects);
      expect(config.queue.redis_tls).toEqual({ ca_file: '/etc/feedsync/redis-tls/ca.crt' });
      const volume = workloadRunning(objects, 'work').spec.template.spec.volumes.find(
        (x: any) => x.name === 'redis-tls',
      );
      expect(volume.secret.items).toEqual([{ key: 'ca.crt', path: 'ca.crt' }]);
    });
  });

  it('with a rediss:// redis.url and no TLS Secret, verifies against the system CAs and mounts nothing', () => {
    const objects = chart.render([
      '-f',
      chart.valuesFile(
        'tls-url.yaml',
        base({ url: 'rediss://:RedisPw-5t7Hn2-LEAKCHECK@redis.cache.svc:6380', tls: { enabled: true } }),
      ),
    ]);
    assertCommonInvariants(objects);
    expect(renderedConfig(objects).config.queue.redis_tls).toBeUndefined();
    const relaxed = chart.render([
      '-f',
      chart.valuesFile(
        'tls-url.yaml',
        base({
          url: 'rediss://:RedisPw-5t7Hn2-LEAKCHECK@redis.cache.svc:6380',
          tls: { enabled: true, rejectUnauthorized: false },
        }),
      ),
    ]);
    expect(renderedConfig(relaxed).config.queue.redis_tls).toEqual({ reject_unauthorized: false });
    for (const w of workloads(relaxed)) {
      expect(w.spec.template.spec.volumes.map((v: any) => v.name)).not.toContain('redis-tls');
    }
  });

  it('writes redis.minReplicasAcked as queue.min_replicas_acked', () => {
    const objects = chart.render([
      '-f',
      chart.valuesFile('acked.yaml', base({ url: REDIS_URL, minReplicasAcked: 2 })),
    ]);
    expect(renderedConfig(objects).config.queue.min_replicas_acked).toBe(2);
    // Single mode has no Redis: the Redis values are not read.
    const single = chart.render(['--set', 'redis.minReplicasAcked=2', '--set', 'redis.tls.enabled=true']);
    expect(renderedConfig(single).config.queue).not.toHaveProperty('min_replicas_acked');
    expect(renderedConfig(single).config.queue).not.toHaveProperty('redis_tls');
  });

  it('takes the whole URL from redis.existingSecret and mounts the TLS Secret there too', () => {
    const objects = chart.render([
      '-f',
      chart.valuesFile(
        'existing-tls.yaml',
        base({ existingSecret: 'redis-auth', tls: { enabled: true, existingSecret: 'memorystore-ca' } }),
      ),
    ]);
    assertCommonInvariants(objects);
    expect(secretData(objects)['redis-url']).toBeUndefined();
    expect(renderedConfig(objects).config.queue.redis_tls).toEqual({
      ca_file: '/etc/feedsync/redis-tls/ca.crt',
    });
    for (const w of workloads(objects)) {
      expect(w.spec.template.spec.volumes).toContainEqual(
        expect.objectContaining({
          name: 'redis-tls',
          secret: expect.objectContaining({ secretName: 'memorystore-ca' }),
        }),
      );
    }
  });
});

describe('helm chart: worker autoscaling on the backlog (KEDA)', () => {
  const keda = (extra: Record<string, unknown> = {}) => ({
    mode: 'scaled',
    redis: { url: REDIS_URL },
    secrets: { values: SECRETS },
    worker: {
      autoscaling: {
        minReplicas: 1,
        maxReplicas: 12,
        keda: { enabled: true, serverAddress: 'http://prometheus-operated.monitoring.svc:9090', ...extra },
      },
    },
  });

  it('passes helm lint --strict', () => {
    const r = lintStrict([chart.valuesFile('keda.yaml', keda())]);
    expect(r.code, r.stdout + r.stderr).toBe(0);
  });

  it('renders a ScaledObject on the waiting jobs of the largest sink instead of the HPA', () => {
    const objects = chart.render(['-n', 'sync', '-f', chart.valuesFile('keda.yaml', keda())]);
    assertCommonInvariants(objects);
    const worker = workloadRunning(objects, 'work');
    expect(worker.spec.replicas).toBeUndefined(); // KEDA owns the count
    expect(ofKind(objects, 'HorizontalPodAutoscaler')).toEqual([]);
    const so = one(objects, 'ScaledObject');
    expect(so.apiVersion).toBe('keda.sh/v1alpha1');
    expect(so.spec).toMatchObject({
      scaleTargetRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: worker.metadata.name },
      minReplicaCount: 1,
      maxReplicaCount: 12,
      pollingInterval: 30,
      cooldownPeriod: 300,
    });
    expect(so.spec.triggers).toEqual([
      {
        type: 'prometheus',
        metadata: {
          serverAddress: 'http://prometheus-operated.monitoring.svc:9090',
          // KEDA reads one sample: the per-sink maxima reduced to the largest.
          query:
            'max(max by (sink) (feedsync_queue_jobs{state="waiting", namespace="sync", service="fs-feedsync-metrics"}))',
          threshold: '500',
          activationThreshold: '0',
        },
      },
    ]);
    // The default query selects the metrics Service the chart renders.
    expect(ofKind(objects, 'Service').map((x) => x.metadata.name)).toContain('fs-feedsync-metrics');
  });

  it('takes a custom query, threshold and TriggerAuthentication', () => {
    const objects = chart.render([
      '-f',
      chart.valuesFile(
        'keda.yaml',
        keda({
          query: 'max(feedsync_queue_jobs{state="waiting"})',
          threshold: 25,
          authenticationRef: 'prom-auth',
        }),
      ),
    ]);
    const trigger = one(objects, 'ScaledObject').spec.triggers[0];
    expect(trigger.metadata.query).toBe('max(feedsync_queue_jobs{state="waiting"})');
    expect(trigger.metadata.threshold).toBe('25');
    expect(trigger.authenticationRef).toEqual({ name: 'prom-auth' });
  });

  it('renders no ScaledObject unless enabled, nor in single mode', () => {
    const scaled = { mode: 'scaled', redis: { url: REDIS_URL }, secrets: { values: SECRETS } };
    expect(ofKind(chart.render(['-f', chart.valuesFile('s.yaml', scaled)]), 'ScaledObject')).toEqual([]);
    const single = chart.render([
      '--set',
      'worker.autoscaling.keda.enabled=true',
      '--set',
      'worker.autoscaling.keda.serverAddress=http://p:9090',
    ]);
    expect(ofKind(single, 'ScaledObject')).toEqual([]);
    expect(ofKind(single, 'Deployment')).toEqual([]);
  });

  it('fails without a Prometheus address', () => {
    const r = chart.helm([
      'template',
      'fs',
      chart.chartDir,
      '-f',
      chart.valuesFile('k.yaml', keda({ serverAddress: '' })),
    ]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/worker\.autoscaling\.keda\.serverAddress/);
  });
});

describe('helm chart: pod customisation', () => {
  // A `type: module` sink whose code comes from a ConfigMap, copied by an init container, with
  // every pod-level knob set once.
  const custom = () => ({
    serviceAccount: { annotations: { 'eks.amazonaws.com/role-arn': 'arn:aws:iam::1:role/feedsync' } },
    config: {
      sources: [
        {
          name: 'scheduling',
          service: 'scheduling',
          base_url: 'https://scheduling.example.invalid/scheduling',
          username: '${SCHED_USER}',
          password_file: '/etc/feedsync/secrets/scheduling-password',
        },
      ],
      sinks: [{ name: 'mine', type: 'module', module: '/opt/sinks/mine.js', options: { topic: 'x' } }],
    },
    secrets: { values: { 'scheduling-password': SECRETS['scheduling-password'] } },
    extraVolumes: [
      { name: 'sink-src', configMap: { name: 'my-sink-code' } },
      { name: 'sink-code', emptyDir: {} },
    ],
    extraVolumeMounts: [{ name: 'sink-code', mountPath: '/opt/sinks', readOnly: true }],
    initContainers: [
      {
        name: 'copy-sink',
        image: 'busybox:1.36',
        command: ['cp', '-r', '/src/.', '/opt/sinks/'],
        volumeMounts: [
          { name: 'sink-src', mountPath: '/src' },
          { name: 'sink-code', mountPath: '/opt/sinks' },
        ],
      },
    ],
    extraEnv: [
      { name: 'SCHED_USER', valueFrom: { secretKeyRef: { name: 'sched-user', key: 'username' } } },
      { name: 'NODE_OPTIONS', value: '--max-old-space-size=400' },
    ],
    envFrom: [{ configMapRef: { name: 'feedsync-env' } }, { secretRef: { name: 'feedsync-env-secret' } }],
    affinity: {
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: [{ matchExpressions: [{ key: 'pool', operator: 'In', values: ['sync'] }] }],
        },
      },
    },
    topologySpreadConstraints: [
      { maxSkew: 1, topologyKey: 'topology.kubernetes.io/zone', whenUnsatisfiable: 'ScheduleAnyway' },
    ],
    priorityClassName: 'feedsync-high',
    podAnnotations: { 'example.com/team': 'sync' },
    podLabels: { team: 'sync' },
    livenessProbe: { periodSeconds: 30 },
    readinessProbe: { timeoutSeconds: 9 },
    startupProbe: null,
  });

  it('passes helm lint --strict in both modes', () => {
    for (const extra of [{}, { mode: 'scaled', redis: { url: REDIS_URL } }]) {
      const r = lintStrict([chart.valuesFile('custom.yaml', { ...custom(), ...extra })]);
      expect(r.code, r.stdout + r.stderr).toBe(0);
    }
  });

  it('renders every value into every feedsync pod', () => {
    for (const extra of [{}, { mode: 'scaled', redis: { url: REDIS_URL } }]) {
      const objects = chart.render(['-f', chart.valuesFile('custom.yaml', { ...custom(), ...extra })]);
      validateAgainstKubernetes(objects);
      expect(one(objects, 'ServiceAccount').metadata.annotations).toEqual({
        'eks.amazonaws.com/role-arn': 'arn:aws:iam::1:role/feedsync',
      });
      for (const w of workloads(objects)) {
        const where = `${w.kind} ${w.metadata.name}`;
        const pod = w.spec.template.spec;
        const c = mainContainer(w);
        expect(pod.volumes, where).toEqual(expect.arrayContaining(custom().extraVolumes));
        expect(c.volumeMounts, where).toContainEqual({
          name: 'sink-code',
          mountPath: '/opt/sinks',
          readOnly: true,
        });
        // The init container gets the chart's restricted security context, having set none.
        expect(pod.initContainers, where).toEqual([
          {
            ...custom().initContainers[0],
            securityContext: expect.objectContaining({ readOnlyRootFilesystem: true, runAsNonRoot: true }),
          },
        ]);
        expect(c.env, where).toEqual([
          { name: 'FEEDSYNC_CONFIG', value: '/etc/feedsync/feedsync.yaml' },
          ...custom().extraEnv,
        ]);
        expect(c.envFrom, where).toEqual(custom().envFrom);
        expect(pod.affinity, where).toEqual(custom().affinity);
        expect(pod.priorityClassName, where).toBe('feedsync-high');
        expect(w.spec.template.metadata.annotations['example.com/team'], where).toBe('sync');
        expect(w.spec.template.metadata.labels.team, where).toBe('sync');
        // The user's zone spread applies to each workload's own pods.
        expect(pod.topologySpreadConstraints, where).toContainEqual({
          maxSkew: 1,
          topologyKey: 'topology.kubernetes.io/zone',
          whenUnsatisfiable: 'ScheduleAnyway',
          labelSelector: { matchLabels: w.spec.selector.matchLabels },
        });
        // Probe overrides merge over the defaults; null removes one.
        expect(c.livenessProbe, where).toEqual({
          httpGet: { path: '/healthz', port: 'metrics' },
          periodSeconds: 30,
          timeoutSeconds: 5,
          failureThreshold: 6,
        });
        expect(c.readinessProbe.timeoutSeconds, where).toBe(9);
        expect(c.readinessProbe.httpGet, where).toEqual({ path: '/readyz', port: 'metrics' });
        expect(c.startupProbe, where).toBeUndefined();
      }
      const { config } = renderedConfig(objects);
      expect(config.sinks[0]).toEqual({
        name: 'mine',
        type: 'module',
        module: '/opt/sinks/mine.js',
        options: { topic: 'x' },
      });
    }
  });

  it('leaves runAsUser, runAsGroup and fsGroup to the platform when set to null (OpenShift)', () => {
    const openshift = {
      mode: 'scaled',
      redis: { url: REDIS_URL },
      secrets: { values: SECRETS },
      podSecurityContext: { runAsUser: null, runAsGroup: null, fsGroup: null },
      securityContext: { runAsUser: null, runAsGroup: null },
      initContainers: [{ name: 'init', image: 'busybox:1.36', command: ['true'] }],
    };
    const file = chart.valuesFile('openshift.yaml', openshift);
    const lint = lintStrict([file]);
    expect(lint.code, lint.stdout + lint.stderr).toBe(0);
    const objects = chart.render(['-f', file]);
    validateAgainstKubernetes(objects);
    const pods = [
      ...workloads(objects).map((w) => w.spec.template.spec),
      ...ofKind(objects, 'Pod').map((p) => p.spec),
    ];
    expect(pods).toHaveLength(3);
    for (const pod of pods) {
      expect(pod.securityContext).toEqual({
        runAsNonRoot: true,
        fsGroupChangePolicy: 'OnRootMismatch',
        seccompProfile: { type: 'RuntimeDefault' },
      });
      for (const c of [...pod.containers, ...(pod.initContainers ?? [])]) {
        expect(c.securityContext, c.name).toEqual({
          runAsNonRoot: true,
          readOnlyRootFilesystem: true,
          allowPrivilegeEscalation: false,
          capabilities: { drop: ['ALL'] },
          seccompProfile: { type: 'RuntimeDefault' },
        });
      }
    }
  });

  it("accepts a parent chart's global values (subchart use)", () => {
    const file = chart.valuesFile('global.yaml', {
      global: {
        imageRegistry: 'registry.example',
        imagePullSecrets: ['x'],
        storageClass: 'fast',
        custom: { a: 1 },
      },
    });
    const lint = lintStrict([file]);
    expect(lint.code, lint.stdout + lint.stderr).toBe(0);
    assertCommonInvariants(chart.render(['-f', file]));
  });
});

describe('helm chart: helm test hook', () => {
  it('renders a test pod asking /readyz of the release through the metrics Service', () => {
    const objects = chart.render();
    const pod = one(objects, 'Pod');
    expect(pod.metadata.annotations).toMatchObject({ 'helm.sh/hook': 'test' });
    expect(pod.spec.restartPolicy).toBe('Never');
    const c = pod.spec.containers[0];
    expect(c.image).toBe(mainContainer(one(objects, 'StatefulSet')).image);
    expect(c.command).toEqual(['node', '-e']);
    expect(c.args.slice(1)).toEqual(['http://fs-feedsync-metrics:9464/readyz', '120']);
    expect(c.securityContext).toMatchObject({ readOnlyRootFilesystem: true, runAsNonRoot: true });
    expect(ofKind(objects, 'Service').map((x) => x.metadata.name)).toContain('fs-feedsync-metrics');
  });

  it('is left out when disabled or without the metrics Service', () => {
    expect(ofKind(chart.render(['--set', 'tests.enabled=false']), 'Pod')).toEqual([]);
    expect(ofKind(chart.render(['--set', 'metrics.service.enabled=false']), 'Pod')).toEqual([]);
  });

  it('its script passes once /readyz answers 200 and fails when it never does', async () => {
    const script = one(chart.render(), 'Pod').spec.containers[0].args[0] as string;
    let answers = 0;
    const server = createServer((req, res) => {
      answers += 1;
      const ready = req.url === '/eventually' && answers >= 2;
      res.writeHead(ready ? 200 : 503, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ ready }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    const run = (path: string, timeoutSeconds: string) =>
      new Promise<{ code: number | null; out: string }>((resolve) => {
        const child = spawn(process.execPath, [
          '-e',
          script,
          `http://127.0.0.1:${port}${path}`,
          timeoutSeconds,
        ]);
        let out = '';
        child.stdout.on('data', (d) => (out += d));
        child.stderr.on('data', (d) => (out += d));
        child.on('close', (code) => resolve({ code, out }));
      });
    try {
      const ok = await run('/eventually', '20');
      expect(ok.code, ok.out).toBe(0);
      expect(ok.out).toContain('200 {"ready":true}');
      const never = await run('/never', '1');
      expect(never.code, never.out).toBe(1);
      expect(never.out).toContain('not ready: 503');
    } finally {
      server.close();
    }
  }, 30_000);
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
    ['a typo in the poller values', { poller: { replica: 3 } }, /replica/, 'lint and template'],
    [
      'a typo in the KEDA values',
      { worker: { autoscaling: { keda: { treshold: 5 } } } },
      /treshold/,
      'lint and template',
    ],
    ['a typo in a top-level pod value', { tolerations: [], affinty: {} }, /affinty/, 'lint and template'],
    [
      'an extra volume named like a chart volume',
      { extraVolumes: [{ name: 'secrets', emptyDir: {} }] },
      /extraVolumes/,
      'lint and template',
    ],
    [
      'an env var with both value and valueFrom',
      { extraEnv: [{ name: 'X', value: 'a', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } }] },
      /extraEnv/,
      'lint and template',
    ],
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
    [
      'redis.tls with a plain redis:// URL',
      { mode: 'scaled', redis: { url: REDIS_URL, tls: { enabled: true } } },
      /redis\.tls\.enabled needs a rediss:\/\/ \(or rediss\+cluster:\/\/, rediss\+sentinel:\/\/\) redis\.url, but it starts with redis:\/\//,
      'template',
    ],
    [
      'a client certificate without its key',
      {
        mode: 'scaled',
        redis: { url: 'rediss://h:6380', tls: { enabled: true, existingSecret: 't', certKey: 'tls.crt' } },
      },
      /redis\.tls\.certKey and redis\.tls\.keyKey go together/,
      'template',
    ],
    [
      'redis.tls.existingSecret without redis.tls.enabled',
      { mode: 'scaled', redis: { url: 'rediss://h:6380', tls: { existingSecret: 't' } } },
      /redis\.tls\.enabled is false/,
      'template',
    ],
    [
      'sentinels without a master name',
      { mode: 'scaled', redis: { sentinel: { sentinels: ['s:26379'] } } },
      /redis\.sentinel\.masterName/,
      'template',
    ],
    [
      'redis.url and redis.cluster together',
      { mode: 'scaled', redis: { url: REDIS_URL, cluster: { nodes: ['n:6379'] } } },
      /leave redis\.url and redis\.existingSecret empty/,
      'template',
    ],
    [
      'redis.password with redis.url',
      { mode: 'scaled', redis: { url: REDIS_URL, password: 'x-LEAKCHECK' } },
      /credentials go in the URL/,
      'template',
    ],
    [
      'a cluster node without a port',
      { mode: 'scaled', redis: { cluster: { nodes: ['node-a'] } } },
      /redis\/cluster\/nodes/,
      'lint and template',
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
