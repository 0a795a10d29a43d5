// The change builders live with the exported conformance suite (feedsync/testing).
export { BASE, makeChange, nextEventId, testContext } from '../../../src/testing/make-change.js';
