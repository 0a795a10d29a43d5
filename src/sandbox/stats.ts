// Counters of what the sandbox served, per service: what tests assert on (requests by kind, status
// codes, 401s, injected faults, subject 404s).
import {
  emptyServiceStats,
  SERVICE_NAMES,
  type FaultKind,
  type RequestKind,
  type SandboxStats,
  type ServiceName,
} from './types.js';

export class StatsRecorder {
  private stats: SandboxStats = fresh();

  request(service: ServiceName, kind: RequestKind): void {
    this.stats[service].requests[kind]++;
  }

  status(service: ServiceName, status: number): void {
    const s = this.stats[service].statuses;
    s[status] = (s[status] ?? 0) + 1;
  }

  unauthorized(service: ServiceName): void {
    this.stats[service].unauthorized++;
  }

  fault(service: ServiceName, kind: FaultKind): void {
    this.stats[service].faults[kind]++;
  }

  subjectNotFound(service: ServiceName): void {
    this.stats[service].subject_not_found++;
  }

  snapshot(): SandboxStats {
    return structuredClone(this.stats);
  }

  reset(): void {
    this.stats = fresh();
  }
}

function fresh(): SandboxStats {
  return Object.fromEntries(SERVICE_NAMES.map((s) => [s, emptyServiceStats()])) as SandboxStats;
}
