import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SinkConfig } from '../../src/config/types.js';
import { ConfigError } from '../../src/core/errors.js';
import { openSink, sinkConfigSchema, sinkTypes } from '../../src/sinks/registry.js';
import { makeChange, testContext } from './support/make-change.js';
import { startReceiver, type Receiver } from './support/receiver.js';

const filter = { sources: [], services: [], event_types: [], resource_types: [] };
let root: string;
let receiver: Receiver;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'feedsync-registry-'));
  receiver = await startReceiver();
});
afterAll(async () => {
  await receiver.close();
  await rm(root, { recursive: true, force: true });
});

describe('sink registry', () => {
  it('lists exactly the five sink types, each under its own type name', () => {
    expect(Object.keys(sinkTypes).sort()).toEqual(['jsonl', 'module', 'postgres', 'sqlite', 'webhook']);
    for (const [type, definition] of Object.entries(sinkTypes)) expect(definition.type).toBe(type);
  });

  it("validates each sink entry with its own module's strict schema", () => {
    const entry = { name: 'hook', type: 'webhook', url: 'http://127.0.0.1:9/x' };
    expect(sinkConfigSchema.parse(entry)).toEqual({ ...sinkTypes.webhook.schema.parse(entry) });
    expect(sinkConfigSchema.parse(entry)).toMatchObject({ timeout_ms: 10000, filter: { sources: [] } });
    expect(sinkConfigSchema.safeParse({ ...entry, path: 'x' }).success).toBe(false);
    expect(sinkConfigSchema.safeParse({ name: 'f', type: 'jsonl', url: 'http://x' }).success).toBe(false);
  });

  it('opens each configured type, resolving relative paths against the config dir', async () => {
    const example = resolve(fileURLToPath(import.meta.url), '../../../config/examples/my-sink.js');
    const configs: SinkConfig[] = [
      { name: 'file', type: 'jsonl', path: 'out/changes.jsonl', filter },
      { name: 'hook', type: 'webhook', url: receiver.url, timeout_ms: 2000, filter },
      { name: 'mirror', type: 'sqlite', path: 'out/mirror.db', filter },
      { name: 'mine', type: 'module', module: example, options: { path: 'out/mine.txt' }, filter },
    ];
    const change = makeChange();
    for (const config of configs) {
      const sink = await openSink(config, testContext(config.name, root));
      await sink.deliver(change);
      await sink.close();
    }
    expect(await readFile(join(root, 'out/changes.jsonl'), 'utf8')).toBe(JSON.stringify(change) + '\n');
    expect(receiver.keys).toEqual([change.key]);
    expect(await readFile(join(root, 'out/mine.txt'), 'utf8')).toContain(change.key);
    expect((await readFile(join(root, 'out/mirror.db'))).subarray(0, 15).toString()).toBe('SQLite format 3');
  });

  it('rejects an unknown type naming the sink', async () => {
    const bogus = { name: 'odd', type: 'kafka', filter } as unknown as SinkConfig;
    const err = await openSink(bogus, testContext('odd', root)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(/sinks\.odd\.type: unknown sink type "kafka"/);
  });
});
