// Every built-in sink type, listed explicitly: nothing registers itself by being imported. Each
// entry is one module's definition (type name, config schema, factory); the config schema's
// `sinks` union and the list of known types are built from this object, so adding a sink type is
// one module plus one line here.
import { z } from 'zod';
import { ConfigError } from '../core/errors.js';
import type { SinkDefinition } from './definition.js';
import { jsonlSink } from './jsonl.js';
import { moduleSink } from './module.js';
import { postgresSink } from './postgres.js';
import type { Sink, SinkContext } from './sink.js';
import { sqliteSink } from './sqlite-mirror.js';
import { webhookSink } from './webhook.js';

export const sinkTypes = {
  jsonl: jsonlSink,
  webhook: webhookSink,
  sqlite: sqliteSink,
  postgres: postgresSink,
  module: moduleSink,
} as const;

export type SinkType = keyof typeof sinkTypes;
type BuiltInSink = (typeof sinkTypes)[SinkType];
type SinkSchema = BuiltInSink['schema'];

/** One `sinks` entry, of any built-in type. */
export type SinkConfig = z.output<SinkSchema>;

export const SINK_TYPES = Object.keys(sinkTypes) as SinkType[];

export const sinkConfigSchema = z.discriminatedUnion(
  'type',
  Object.values(sinkTypes).map((definition) => definition.schema) as [SinkSchema, ...SinkSchema[]],
);

export async function openSink(config: SinkConfig, ctx: SinkContext): Promise<Sink> {
  const definition = (sinkTypes as Record<string, SinkDefinition<SinkConfig> | undefined>)[config.type];
  // Unreachable for a validated config; kept so a hand-built config still gets a clear error.
  if (!definition)
    throw new ConfigError(
      `sinks.${config.name}.type`,
      `unknown sink type ${JSON.stringify(config.type)}; known: ${SINK_TYPES.join(', ')}`,
    );
  return definition.open(config, ctx);
}
