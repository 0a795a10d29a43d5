// Runs the real helm binary (fetched by scripts/fetch-helm.sh) against a temporary copy of
// the chart and turns its output into plain objects, validated with kubernetes-models.
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments, stringify } from 'yaml';
import { Deployment, StatefulSet } from 'kubernetes-models/apps/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { Ingress, NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ConfigMap, Pod, Secret, Service, ServiceAccount } from 'kubernetes-models/v1';
import { ScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1';
import {
  PrometheusRule,
  ServiceMonitor,
} from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';

export const repoRoot = resolve(fileURLToPath(new URL('.', import.meta.url)), '../..');
const helmBin = join(repoRoot, '.helm/bin/helm');

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [key: string]: any;
}

export interface HelmResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface ChartSandbox {
  chartDir: string;
  /** Writes a values file into the sandbox and returns its path. */
  valuesFile(name: string, values: unknown): string;
  helm(args: string[]): HelmResult;
  /** `helm template`; throws with helm's stderr when rendering fails. */
  render(args?: string[]): K8sObject[];
  cleanup(): void;
}

/** Minimal stand-ins, used only when the real files are not in the chart yet. */
export const placeholderRules = {
  groups: [
    {
      name: 'feedsync-test',
      rules: [{ alert: 'FeedsyncTestAlert', expr: 'vector(1) > 2', labels: { severity: 'info' } }],
    },
  ],
};
export const placeholderDashboard = { title: 'feedsync (test placeholder)', panels: [], schemaVersion: 39 };

export function fetchHelm(): void {
  const result = spawnSync('bash', [join(repoRoot, 'scripts/fetch-helm.sh')], { encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`scripts/fetch-helm.sh failed: ${result.stderr}`);
}

export function createChartSandbox(): ChartSandbox {
  const root = mkdtempSync(join(tmpdir(), 'feedsync-helm-'));
  const chartDir = join(root, 'feedsync');
  cpSync(join(repoRoot, 'helm/feedsync'), chartDir, { recursive: true });
  const rules = join(chartDir, 'rules/feedsync.rules.yaml');
  if (!existsSync(rules)) {
    mkdirSync(join(chartDir, 'rules'), { recursive: true });
    writeFileSync(rules, stringify(placeholderRules));
  }
  const dashboard = join(chartDir, 'dashboards/feedsync.json');
  if (!existsSync(dashboard)) {
    mkdirSync(join(chartDir, 'dashboards'), { recursive: true });
    writeFileSync(dashboard, JSON.stringify(placeholderDashboard, null, 2));
  }
  // Keep helm's caches and config out of the user's home.
  const env = {
    ...process.env,
    HELM_CACHE_HOME: join(root, 'helm-cache'),
    HELM_CONFIG_HOME: join(root, 'helm-config'),
    HELM_DATA_HOME: join(root, 'helm-data'),
  };

  const helm = (args: string[]): HelmResult => {
    const r = spawnSync(helmBin, args, { encoding: 'utf8', env, timeout: 30_000 });
    return { code: r.status ?? -1, stdout: r.stdout ?? '', stderr: r.stderr ?? String(r.error ?? '') };
  };

  return {
    chartDir,
    valuesFile(name, values) {
      const path = join(root, name);
      writeFileSync(path, stringify(values));
      return path;
    },
    helm,
    render(args = []) {
      const r = helm(['template', 'fs', chartDir, ...args]);
      if (r.code !== 0) throw new Error(`helm template ${args.join(' ')} failed: ${r.stderr}`);
      return parseManifests(r.stdout);
    },
    cleanup() {
      rmSync(root, { recursive: true, force: true });
    },
  };
}

export function parseManifests(text: string): K8sObject[] {
  return parseAllDocuments(text)
    .map((doc) => {
      if (doc.errors.length > 0) throw new Error(`invalid YAML from helm: ${doc.errors[0]!.message}`);
      return doc.toJS() as K8sObject | null;
    })
    .filter((obj): obj is K8sObject => obj !== null);
}

const models: Record<string, new (data: any) => { validate(): void }> = {
  'apps/v1/StatefulSet': StatefulSet,
  'apps/v1/Deployment': Deployment,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'v1/ConfigMap': ConfigMap,
  'v1/Pod': Pod,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'v1/ServiceAccount': ServiceAccount,
  'networking.k8s.io/v1/Ingress': Ingress,
  'networking.k8s.io/v1/NetworkPolicy': NetworkPolicy,
  // CRDs, validated against the schemas their operators publish.
  'keda.sh/v1alpha1/ScaledObject': ScaledObject,
  'monitoring.coreos.com/v1/PrometheusRule': PrometheusRule,
  'monitoring.coreos.com/v1/ServiceMonitor': ServiceMonitor,
};

/** Validates every object against the Kubernetes (and KEDA / Prometheus Operator CRD) schemas, offline. */
export function validateAgainstKubernetes(objects: K8sObject[]): string[] {
  const validated: string[] = [];
  for (const obj of objects) {
    const model = models[`${obj.apiVersion}/${obj.kind}`];
    if (!model) {
      throw new Error(`no Kubernetes schema for ${obj.apiVersion} ${obj.kind} ${obj.metadata.name}`);
    }
    try {
      new model(obj).validate();
    } catch (err) {
      throw new Error(`${obj.kind} ${obj.metadata.name} is invalid: ${(err as Error).message}`);
    }
    validated.push(`${obj.kind}/${obj.metadata.name}`);
  }
  return validated;
}

export function ofKind(objects: K8sObject[], kind: string): K8sObject[] {
  return objects.filter((o) => o.kind === kind);
}

export function one(objects: K8sObject[], kind: string, name?: string): K8sObject {
  const found = ofKind(objects, kind).filter((o) => name === undefined || o.metadata.name === name);
  if (found.length !== 1) {
    throw new Error(`expected one ${kind}${name ? ` ${name}` : ''}, found ${found.length}`);
  }
  return found[0]!;
}

/** The workload running `feedsync <command>` (exactly one). */
export function workloadRunning(objects: K8sObject[], command: string): K8sObject {
  const found = workloads(objects).filter((w) => mainContainer(w).args?.[0] === command);
  if (found.length !== 1) throw new Error(`expected one workload running ${command}, found ${found.length}`);
  return found[0]!;
}

/** StatefulSets and Deployments: the objects that run feedsync pods. */
export function workloads(objects: K8sObject[]): K8sObject[] {
  return objects.filter((o) => o.kind === 'StatefulSet' || o.kind === 'Deployment');
}

export function mainContainer(workload: K8sObject): any {
  const containers = workload.spec.template.spec.containers as any[];
  const container = containers.find((c) => c.name === 'feedsync');
  if (!container) throw new Error(`${workload.kind} ${workload.metadata.name} has no feedsync container`);
  return container;
}

/** Replicas that run `feedsync <command>` across all workloads (autoscaled counts as >1). */
export function replicasRunning(objects: K8sObject[], command: string): number {
  let total = 0;
  for (const w of workloads(objects)) {
    for (const c of w.spec.template.spec.containers as any[]) {
      if (c.args?.[0] !== command) continue;
      const autoscaled = [
        ...ofKind(objects, 'HorizontalPodAutoscaler'),
        ...ofKind(objects, 'ScaledObject'),
      ].some((h) => h.spec.scaleTargetRef.name === w.metadata.name);
      total += autoscaled ? Infinity : (w.spec.replicas ?? 1);
    }
  }
  return total;
}

/** The feedsync config carried by the chart's ConfigMap, parsed. */
export function renderedConfig(objects: K8sObject[]): { text: string; config: any } {
  const maps = ofKind(objects, 'ConfigMap').filter((c) => c.data?.['feedsync.yaml'] !== undefined);
  if (maps.length !== 1) throw new Error(`expected one ConfigMap with feedsync.yaml, found ${maps.length}`);
  const text = maps[0]!.data['feedsync.yaml'] as string;
  const docs = parseAllDocuments(text);
  if (docs.length !== 1 || docs[0]!.errors.length > 0)
    throw new Error('feedsync.yaml is not one valid YAML document');
  return { text, config: docs[0]!.toJS() };
}

/** Every key path in a parsed config whose name is one of `names`. */
export function keyPaths(value: unknown, names: Set<string>, path = ''): string[] {
  if (Array.isArray(value)) return value.flatMap((v, i) => keyPaths(v, names, `${path}[${i}]`));
  if (value === null || typeof value !== 'object') return [];
  return Object.entries(value).flatMap(([k, v]) => [
    ...(names.has(k) ? [`${path}.${k}`] : []),
    ...keyPaths(v, names, `${path}.${k}`),
  ]);
}
