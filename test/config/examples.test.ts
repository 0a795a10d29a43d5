// The shipped example configs must validate (with the environment they reference).
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadConfigFile, parseConfig } from '../../src/config/load.js';
import { collectSecrets, redactConfig } from '../../src/config/redact.js';
import { tempDir } from './helpers.js';

const CONFIG_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '../../config');

/** Values for every variable the examples use; an example using another one fails below. */
const ENV: Record<string, string> = {
  SCHEDULING_USER: 'sched-user',
  SCHEDULING_PASSWORD: 'sched-pass',
  WORKFLOW_USER: 'wf-user',
  WORKFLOW_PASSWORD: 'wf-pass',
  WEBHOOK_SECRET: 'hook-secret',
  SCHEDULING_BASE_URL: 'http://127.0.0.1:4010/scheduling',
  WORKFLOW_BASE_URL: 'http://127.0.0.1:4010/workflow',
  LOG_LEVEL: 'info',
};

function yamlFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = join(dir, entry.name);
    if (entry.isDirectory()) return yamlFiles(full);
    return /\.ya?ml$/.test(entry.name) ? [full] : [];
  });
}

let tmp: string;
let cleanup: () => void;
beforeEach(() => ({ dir: tmp, cleanup } = tempDir()));
afterEach(() => cleanup());

describe('example configs', () => {
  it('config/feedsync.yaml validates and documents the schema defaults', () => {
    const { config } = loadConfigFile(join(CONFIG_DIR, 'feedsync.yaml'), ENV);
    expect(config.sources.map((s) => s.name)).toEqual(['scheduling', 'workflow']);
    expect(config.sources[0]).toMatchObject({
      username: 'sched-user',
      password: 'sched-pass',
      format: 'json',
    });
    expect(config.queue.driver).toBe('local');
    expect(config.http.port).toBe(9464);
    expect(JSON.stringify(redactConfig(config))).not.toMatch(/sched-pass|wf-pass|hook-secret/);
  });

  it('config/kubernetes.yaml validates with its secret files mounted', () => {
    const secrets = join(tmp, 'secrets');
    mkdirSync(secrets);
    writeFileSync(join(secrets, 'redis-url'), 'redis://:redis-pw@feedsync-redis:6379/0\n');
    writeFileSync(join(secrets, 'scheduling-password'), 'k8s-sched-pw\n');
    writeFileSync(join(secrets, 'workflow-password'), 'k8s-wf-pw\n');
    writeFileSync(join(secrets, 'catalog-hook-secret'), 'k8s-hook-catalog\n');
    writeFileSync(join(secrets, 'jobs-hook-secret'), 'k8s-hook-jobs\n');
    const text = readFileSync(join(CONFIG_DIR, 'kubernetes.yaml'), 'utf8');
    expect(text).toContain('/etc/feedsync/secrets/');
    const relocated = text.replaceAll('/etc/feedsync/secrets/', `${secrets}/`);
    const { config } = parseConfig(relocated, { dir: CONFIG_DIR, env: ENV });
    expect(config.store.path).toBe('/data/feedsync.db');
    expect(config.queue).toMatchObject({
      driver: 'bullmq',
      redis_url: 'redis://:redis-pw@feedsync-redis:6379/0',
    });
    expect(config.sources.map((s) => s.password)).toEqual(['k8s-sched-pw', 'k8s-wf-pw']);
    expect(collectSecrets(config)).toEqual(
      expect.arrayContaining(['redis-pw', 'k8s-hook-catalog', 'k8s-hook-jobs', 'k8s-sched-pw']),
    );
    expect(config.sources.map((s) => new URL(s.base_url).protocol)).toEqual(['https:', 'https:']);
    // One secret per receiver (docs/webhook-signatures.md).
    const hooks = config.sinks.filter((s) => s.type === 'webhook');
    expect(new Set(hooks.map((s) => s.secret)).size).toBe(hooks.length);
    expect(JSON.stringify(redactConfig(config))).not.toMatch(/redis-pw|k8s-/);
  });

  it('every other YAML under config/ validates', () => {
    const others = yamlFiles(CONFIG_DIR).filter((f) => !/\/(feedsync|kubernetes)\.yaml$/.test(f));
    for (const file of others) {
      const used = [...readFileSync(file, 'utf8').matchAll(/(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g)].map(
        (m) => m[1]!,
      );
      const missing = used.filter((name) => !(name in ENV));
      expect(missing, `${relative(CONFIG_DIR, file)} uses variables this test does not set`).toEqual([]);
      expect(() => loadConfigFile(file, ENV), relative(CONFIG_DIR, file)).not.toThrow();
    }
  });
});
