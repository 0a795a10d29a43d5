import { eventTypes, type ServiceAdapter } from './adapter.js';

/**
 * The workflow feed is ordered by timestamp while `newer_than` filters by id, so its listing order
 * can stray from id order. We rely on that staying within this many places (the sandbox enforces
 * the same bound); pipeline/cursor.ts explains why that makes the cursor rule skip nothing. The
 * poller warns and counts when a page shows more disorder than this.
 */
export const WORKFLOW_MAX_DISORDER = 5;

export const workflowAdapter: ServiceAdapter = {
  kind: 'workflow',
  knownEventTypes: eventTypes([
    [
      ['asset', 'job', 'task'],
      ['created', 'updated', 'deleted'],
    ],
  ]),
  // The spec shows no expand on the workflow feed: every subject is fetched by its link.
  feedParams: () => ({}),
  maxDisorder: WORKFLOW_MAX_DISORDER,
  linkRel: (_type, rel) => rel,
  normalizeSubject: (subject) => subject,
};
