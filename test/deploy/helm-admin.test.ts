// The chart's admin values: the config's admin block, the tokens mounted from the operator's
// Secret, the container port, and the optional Service, Ingress and NetworkPolicy — rendered by
// the real helm binary and validated against the Kubernetes schemas.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createChartSandbox,
  fetchHelm,
  mainContainer,
  one,
  ofKind,
  renderedConfig,
  validateAgainstKubernetes,
  workloads,
  type ChartSandbox,
  type K8sObject,
} from './helm-support.js';

let chart: ChartSandbox;
beforeAll(() => {
  fetchHelm();
  chart = createChartSandbox();
});
afterAll(() => chart?.cleanup());

const render = (values: unknown) =>
  chart.render(['-f', chart.valuesFile(`admin-${Date.now()}.yaml`, values)]);
const portForwarded = {
  admin: { enabled: true, existingSecret: 'feedsync-admin', readTokenKey: 'read-token' },
};

function expectTokensMounted(objects: K8sObject[]) {
  for (const w of workloads(objects)) {
    const pod = w.spec.template.spec;
    expect(pod.volumes).toContainEqual({
      name: 'admin-tokens',
      secret: expect.objectContaining({
        secretName: 'feedsync-admin',
        items: [
          { key: 'token', path: 'token' },
          { key: 'read-token', path: 'read-token' },
        ],
      }),
    });
    expect(mainContainer(w).volumeMounts).toContainEqual({
      name: 'admin-tokens',
      mountPath: '/etc/feedsync/admin',
      readOnly: true,
    });
    expect(mainContainer(w).ports).toContainEqual({ name: 'admin', containerPort: 9465, protocol: 'TCP' });
  }
}

const everything = {
  admin: {
    enabled: true,
    existingSecret: 'feedsync-admin',
    service: { enabled: true },
    ingress: { enabled: true, host: 'feedsync-admin.example.internal' },
    networkPolicy: { enabled: true, from: [{ podSelector: {} }] },
  },
};

describe('helm chart: admin', () => {
  it('passes helm lint --strict with every admin object, in both modes', () => {
    for (const mode of ['single', 'scaled']) {
      const values = chart.valuesFile(`lint-${mode}.yaml`, {
        ...everything,
        mode,
        redis: { url: 'redis://redis:6379' },
      });
      const r = chart.helm(['lint', '--strict', chart.chartDir, '-f', values]);
      expect(r.code, r.stdout + r.stderr).toBe(0);
    }
  });

  it('is off by default: no admin block, port, volume or object', () => {
    const objects = chart.render();
    expect(renderedConfig(objects).config.admin).toBeUndefined();
    for (const w of workloads(objects)) {
      expect(mainContainer(w).ports.map((p: { name: string }) => p.name)).toEqual(['metrics']);
      expect(w.spec.template.spec.volumes.map((v: { name: string }) => v.name)).not.toContain('admin-tokens');
    }
    expect(objects.filter((o) => o.metadata.name.endsWith('-admin'))).toEqual([]);
  });

  it('on loopback for kubectl port-forward, tokens from the Secret, in both modes', () => {
    for (const mode of ['single', 'scaled']) {
      const objects = render({ ...portForwarded, mode, redis: { url: 'redis://redis:6379' } });
      validateAgainstKubernetes(objects);
      expect(renderedConfig(objects).config.admin).toEqual({
        enabled: true,
        host: '127.0.0.1',
        port: 9465,
        token_file: '/etc/feedsync/admin/token',
        read_token_file: '/etc/feedsync/admin/read-token',
      });
      expectTokensMounted(objects);
      expect(ofKind(objects, 'Service').map((s) => s.metadata.name)).not.toContain('fs-feedsync-admin');
      expect(ofKind(objects, 'Ingress')).toEqual([]);
    }
  });

  it('with a Service, an Ingress and a NetworkPolicy: binds 0.0.0.0, the admin port only from the peers named', () => {
    const from = [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'ingress-nginx' } } }];
    const objects = render({
      admin: {
        ...portForwarded.admin,
        service: { enabled: true },
        ingress: {
          enabled: true,
          className: 'nginx',
          host: 'feedsync-admin.example.internal',
          tls: [{ hosts: ['feedsync-admin.example.internal'], secretName: 'admin-tls' }],
        },
        networkPolicy: { enabled: true, from },
      },
    });
    expect(validateAgainstKubernetes(objects)).toEqual(
      expect.arrayContaining([
        'Service/fs-feedsync-admin',
        'Ingress/fs-feedsync-admin',
        'NetworkPolicy/fs-feedsync-admin',
      ]),
    );
    expect(renderedConfig(objects).config.admin.host).toBe('0.0.0.0');
    const service = one(objects, 'Service', 'fs-feedsync-admin');
    expect(service.spec.ports).toEqual([{ name: 'admin', port: 9465, targetPort: 'admin', protocol: 'TCP' }]);
    const ingress = one(objects, 'Ingress');
    expect(ingress.spec.ingressClassName).toBe('nginx');
    expect(ingress.spec.rules[0].http.paths[0].backend.service).toEqual({
      name: 'fs-feedsync-admin',
      port: { name: 'admin' },
    });
    const policy = one(objects, 'NetworkPolicy');
    expect(policy.spec.ingress).toEqual([
      { ports: [{ port: 'metrics', protocol: 'TCP' }] },
      { from, ports: [{ port: 'admin', protocol: 'TCP' }] },
    ]);
  });

  it('refuses what cannot work: no token Secret, an Ingress without its Service or host, a config.admin of its own', () => {
    const fails = (values: unknown) => {
      const r = chart.helm([
        'template',
        'fs',
        chart.chartDir,
        '-f',
        chart.valuesFile(`bad-${Date.now()}.yaml`, values),
      ]);
      expect(r.code).not.toBe(0);
      return r.stderr;
    };
    expect(fails({ admin: { enabled: true } })).toContain('admin.enabled needs admin.existingSecret');
    expect(fails({ admin: { ...portForwarded.admin, ingress: { enabled: true, host: 'x' } } })).toContain(
      'admin.ingress.enabled needs admin.enabled and admin.service.enabled',
    );
    expect(
      fails({ admin: { ...portForwarded.admin, service: { enabled: true }, ingress: { enabled: true } } }),
    ).toContain('admin.ingress.enabled needs admin.ingress.host');
    expect(fails({ config: { admin: { enabled: true } } })).toMatch(/admin/);
  });
});
