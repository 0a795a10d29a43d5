// What a built-in sink module exports: its type name, the strict zod schema of its config entry
// (the common name and filter included) and its factory. sinks/registry.ts lists them.
import type { z } from 'zod';
import type { Sink, SinkContext } from './sink.js';

export interface SinkDefinition<Config extends { type: string; name: string }> {
  type: Config['type'];
  schema: z.ZodType<Config>;
  open(config: Config, ctx: SinkContext): Promise<Sink>;
}
