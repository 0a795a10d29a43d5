import type { ServiceKind } from '../core/change.js';
import type { ServiceAdapter } from './adapter.js';
import { schedulingAdapter } from './scheduling.js';
import { workflowAdapter } from './workflow.js';

export const services: Record<ServiceKind, ServiceAdapter> = {
  scheduling: schedulingAdapter,
  workflow: workflowAdapter,
};
export type { ServiceAdapter };
