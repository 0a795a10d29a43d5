// `feedsync/testing`: what a sink written outside this repository needs to pass the conformance
// suite every built-in sink passes. Needs vitest (an optional peer dependency of feedsync);
// docs/sink-testing.md shows a complete test file.
export { describeSinkConformance, type SinkHarness } from './conformance.js';
export { makeChange, nextEventId, testContext } from './make-change.js';
export { loadModuleSink, type ModuleSinkOptions } from './module-sink.js';
export { NeverError, RetryLaterError } from '../core/errors.js';
export type { Sink, SinkContext } from '../sinks/sink.js';
export type { Change } from '../core/change.js';
