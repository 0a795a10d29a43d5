// Every sink type, listed explicitly: adding one means adding a line here, nothing registers
// itself by being imported.
import type { SinkConfig } from '../config/types.js';
import { ConfigError } from '../core/errors.js';
import { openJsonlSink } from './jsonl.js';
import { openModuleSink } from './module.js';
import type { Sink, SinkContext } from './sink.js';
import { openSqliteSink } from './sqlite-mirror.js';
import { openWebhookSink } from './webhook.js';

export const sinkTypes = {
  jsonl: openJsonlSink,
  webhook: openWebhookSink,
  sqlite: openSqliteSink,
  module: openModuleSink,
} as const;

export type SinkType = keyof typeof sinkTypes;

export async function openSink(config: SinkConfig, ctx: SinkContext): Promise<Sink> {
  switch (config.type) {
    case 'jsonl':
      return sinkTypes.jsonl(config, ctx);
    case 'webhook':
      return sinkTypes.webhook(config, ctx);
    case 'sqlite':
      return sinkTypes.sqlite(config, ctx);
    case 'module':
      return sinkTypes.module(config, ctx);
    default: {
      // Unreachable for a validated config; kept so a hand-built config still gets a clear error.
      const type = (config as { type?: unknown }).type;
      throw new ConfigError(
        `sinks.${(config as { name?: unknown }).name}.type`,
        `unknown sink type ${JSON.stringify(type)}; known: ${Object.keys(sinkTypes).join(', ')}`,
      );
    }
  }
}
