// The package's public API for people writing their own sinks (and embedding feedsync).
export { NeverError, RetryLaterError } from './core/errors.js';
export type { Sink, SinkContext, SinkFactory } from './sinks/sink.js';
export type { Change, ServiceKind, SubjectState } from './core/change.js';
export type { Resource } from './core/resource.js';
