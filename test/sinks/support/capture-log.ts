// A sink context whose logger keeps its JSON lines, to check what the operator is told.
import { Writable } from 'node:stream';
import pino from 'pino';
import type { SinkContext } from '../../../src/sinks/sink.js';

export function capturingContext(
  name: string,
  configDir: string,
): { ctx: SinkContext; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line) lines.push(JSON.parse(line));
      done();
    },
  });
  return { ctx: { name, configDir, logger: pino({ level: 'info' }, stream) }, lines };
}
