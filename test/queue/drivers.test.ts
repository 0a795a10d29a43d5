// queue.driver → factory: `run` with the local driver must not load BullMQ or ioredis (~30 MB).
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { PipelineEvents } from '../../src/core/events.js';
import { openQueueDriver } from '../../src/queue/drivers.js';
import { tempDir } from '../support/harness.js';
import { driverConfig } from './support.js';

const dist = resolve(import.meta.dirname, '../../dist');

/** Opens the configured driver in a fresh process; returns every package specifier it resolved. */
function packagesLoaded(config: object, mode: string, alsoImport?: string): string[] {
  const dir = tempDir();
  const configPath = join(dir, 'config.json');
  writeFileSync(configPath, JSON.stringify(config));
  const script = `
    import { registerHooks } from 'node:module';
    const seen = new Set();
    registerHooks({ resolve(specifier, context, next) {
      if (!specifier.startsWith('.') && !specifier.startsWith('node:') && !specifier.startsWith('file:')) seen.add(specifier.split('/')[0]);
      return next(specifier, context);
    } });
    const { readFileSync } = await import('node:fs');
    const { pino } = await import('pino');
    const { openQueueDriver } = await import(${JSON.stringify(join(dist, 'queue/drivers.js'))});
    const { PipelineEvents } = await import(${JSON.stringify(join(dist, 'core/events.js'))});
    const config = JSON.parse(readFileSync(${JSON.stringify(configPath)}, 'utf8'));
    const driver = await openQueueDriver({ config, mode: ${JSON.stringify(mode)}, sinks: [], events: new PipelineEvents(), logger: pino({ level: 'silent' }) });
    await driver.close();
    ${alsoImport ? `await import(${JSON.stringify(join(dist, alsoImport))});` : ''}
    process.stdout.write(JSON.stringify([...seen]));
  `;
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
  return JSON.parse(out) as string[];
}

describe('queue driver selection', () => {
  it('opens the local driver for run and ops without loading bullmq or ioredis', () => {
    const config = driverConfig(tempDir(), ['out']);
    for (const mode of ['run', 'ops']) {
      const loaded = packagesLoaded(config, mode);
      expect(loaded).toContain('better-sqlite3');
      expect(loaded).not.toContain('bullmq');
      expect(loaded).not.toContain('ioredis');
    }
    // The probe does see them when the bullmq driver's module is imported.
    expect(packagesLoaded(config, 'ops', 'queue/bullmq/index.js')).toContain('bullmq');
  });

  it.each(['poll', 'work'] as const)(
    'refuses "%s" with the local driver, naming queue.driver',
    async (mode) => {
      const config = driverConfig(tempDir(), ['out']);
      const opening = openQueueDriver({
        config,
        mode,
        sinks: [],
        events: new PipelineEvents(),
        logger: pino({ level: 'silent' }),
      });
      await expect(opening).rejects.toThrow(/queue\.driver: "feedsync .*" needs queue\.driver: bullmq/);
    },
  );
});
