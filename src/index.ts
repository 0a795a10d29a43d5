// The package's public API for people writing their own sinks (and embedding feedsync).
export { NeverError, RetryLaterError } from './errors.js';
export type { Sink, SinkContext, SinkFactory } from './sinks/sink.js';
export type { Change, ServiceKind, SubjectState } from './pipeline/change.types.js';
export type { Resource } from './upstream/resource.js';
