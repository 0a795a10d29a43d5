// The chart's postgres sink examples (helm/feedsync/README.md): the URL from a mounted Secret
// (url_file) or from an environment variable filled from a Secret (url: ${VAR}), rendered by the
// real helm binary; the rendered config is loaded by feedsync with those secrets in place. An
// inline URL, which would put the password in the ConfigMap, is refused by the values schema.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import {
  createChartSandbox,
  fetchHelm,
  mainContainer,
  one,
  renderedConfig,
  type ChartSandbox,
} from '../deploy/helm-support.js';

const SECRETS_DIR = '/etc/feedsync/secrets/';
const PG_URL = 'postgres://feedsync:PgPw-4k8Lq2-LEAKCHECK@db.example.internal:5432/app?sslmode=verify-full';
const SECRETS: Record<string, string> = {
  'scheduling-password': 'sched-pw',
  'workflow-password': 'wf-pw',
  'hook-secret': 'hook-secret',
  'postgres-url': PG_URL,
  'postgres-ca.crt': '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n',
};

let chart: ChartSandbox;
let secrets: string;
beforeAll(() => {
  fetchHelm();
  chart = createChartSandbox();
  secrets = mkdtempSync(join(tmpdir(), 'feedsync-pg-helm-'));
  for (const [key, value] of Object.entries(SECRETS)) writeFileSync(join(secrets, key), value);
});
afterAll(() => {
  chart?.cleanup();
  rmSync(secrets, { recursive: true, force: true });
});

/** The rendered feedsync.yaml loaded as feedsync would, the Secret's files at their mount path. */
function load(text: string, env: Record<string, string> = {}) {
  return parseConfig(text.replaceAll(SECRETS_DIR, `${secrets}/`), { dir: secrets, env }).config;
}

describe('helm chart: a postgres sink whose URL comes from a Secret', () => {
  it('url_file: a key of secrets.existingSecret, mounted; the ConfigMap holds no password', () => {
    const values = chart.valuesFile('pg-file.yaml', {
      secrets: { existingSecret: 'feedsync-credentials' },
      config: {
        sinks: [
          {
            name: 'warehouse',
            type: 'postgres',
            url_file: '/etc/feedsync/secrets/postgres-url',
            schema: 'feedsync',
            ca_file: '/etc/feedsync/secrets/postgres-ca.crt',
            pool_size: 4,
          },
        ],
      },
    });
    const lint = chart.helm(['lint', '--strict', chart.chartDir, '-f', values]);
    expect(lint.code, lint.stdout + lint.stderr).toBe(0);
    const objects = chart.render(['-f', values]);
    const { text } = renderedConfig(objects);
    expect(JSON.stringify(objects)).not.toContain('LEAKCHECK');
    const sts = one(objects, 'StatefulSet');
    const volume = sts.spec.template.spec.volumes.find((v: any) => v.name === 'secrets');
    expect(volume.projected.sources).toContainEqual({ secret: { name: 'feedsync-credentials' } });
    expect(mainContainer(sts).volumeMounts).toContainEqual(
      expect.objectContaining({ name: 'secrets', mountPath: '/etc/feedsync/secrets' }),
    );
    expect(load(text).sinks[0]).toMatchObject({
      type: 'postgres',
      url: PG_URL,
      schema: 'feedsync',
      ca_file: join(secrets, 'postgres-ca.crt'),
    });
  });

  it('url: ${VAR} filled from a Secret through extraEnv', () => {
    const values = chart.valuesFile('pg-env.yaml', {
      secrets: { values: { 'scheduling-password': 'sched-pw', 'workflow-password': 'wf-pw' } },
      extraEnv: [
        { name: 'FEEDSYNC_PG_URL', valueFrom: { secretKeyRef: { name: 'warehouse-db-app', key: 'uri' } } },
      ],
      config: { sinks: [{ name: 'warehouse', type: 'postgres', url: '${FEEDSYNC_PG_URL}' }] },
    });
    const objects = chart.render(['-f', values]);
    expect(mainContainer(one(objects, 'StatefulSet')).env).toContainEqual({
      name: 'FEEDSYNC_PG_URL',
      valueFrom: { secretKeyRef: { name: 'warehouse-db-app', key: 'uri' } },
    });
    const { text } = renderedConfig(objects);
    expect(text).toContain('url: ${FEEDSYNC_PG_URL}');
    expect(load(text, { FEEDSYNC_PG_URL: PG_URL }).sinks[0]).toMatchObject({ type: 'postgres', url: PG_URL });
  });

  it('refuses an inline URL, a url_file missing from secrets.values, and both at once', () => {
    const render = (name: string, values: unknown) =>
      chart.helm(['template', chart.chartDir, '-f', chart.valuesFile(name, values)]);
    const sink = { name: 'warehouse', type: 'postgres' };
    const inline = render('pg-inline.yaml', { config: { sinks: [{ ...sink, url: PG_URL }] } });
    expect(inline.code).not.toBe(0);
    expect(inline.stderr).toMatch(/sinks/);
    const missing = render('pg-missing.yaml', {
      secrets: { values: { 'scheduling-password': 'sched-pw', 'workflow-password': 'wf-pw' } },
      config: { sinks: [{ ...sink, url_file: '/etc/feedsync/secrets/postgres-url' }] },
    });
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toContain(
      'config.sinks[warehouse].url_file is /etc/feedsync/secrets/postgres-url but secrets.values has no key "postgres-url"',
    );
    const both = render('pg-both.yaml', {
      config: { sinks: [{ ...sink, url: '${X}', url_file: '/etc/feedsync/secrets/postgres-url' }] },
    });
    expect(both.code).not.toBe(0);
  });
});
