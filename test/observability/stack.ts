// Starts the real metrics registry, readiness tracker and HTTP server on 127.0.0.1:0.
import { PipelineEvents } from '../../src/core/events.js';
import type { SinkJobCounts } from '../../src/queue/queue.js';
import type { SinkPositionView } from '../../src/queue/sink-positions.js';
import { createLiveness, createReadiness, type ReadinessCheck } from '../../src/observability/health.js';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { startHttpServer } from '../../src/observability/server.js';

export interface StackOptions {
  sources?: string[];
  sinks?: string[];
  checks?: Record<string, ReadinessCheck>;
  queueCounts?: () => Promise<Record<string, SinkJobCounts>>;
  sinkPositions?: (counts: Record<string, SinkJobCounts> | undefined) => Promise<SinkPositionView[]>;
  sinkPairs?: { source: string; sink: string }[];
}

export async function startStack(opts: StackOptions = {}) {
  const events = new PipelineEvents();
  const sources = opts.sources ?? ['scheduling', 'workflow'];
  const sinks = opts.sinks ?? ['file', 'hook'];
  const logger = createLogger({ level: 'silent' });
  const metrics = createMetrics({
    events,
    sources,
    sinks,
    version: '1.2.3-test',
    queueCounts: opts.queueCounts,
    sinkPositions: opts.sinkPositions,
    sinkPairs: opts.sinkPairs,
    logger,
  });
  const readiness = createReadiness({
    events,
    sources: sources.map((name) => ({ name, pollIntervalMs: 1000 })),
    checks: opts.checks ?? {},
  });
  const liveness = createLiveness();
  const server = await startHttpServer({
    host: '127.0.0.1',
    port: 0,
    registry: metrics.registry,
    readiness,
    liveness,
    logger,
  });
  const base = `http://127.0.0.1:${server.port}`;
  return {
    events,
    base,
    async get(path: string) {
      const res = await fetch(`${base}${path}`);
      return { status: res.status, contentType: res.headers.get('content-type'), body: await res.text() };
    },
    async close() {
      await server.close();
      metrics.close();
      readiness.close();
      liveness.close();
    },
  };
}
