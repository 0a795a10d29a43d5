// The sandbox's control API, seen from the benchmark (the sandbox runs in another process).
import type { SandboxEvent, SandboxStats, ServiceName } from '../../dist/sandbox/types.js';

export class SandboxControl {
  constructor(private readonly controlUrl: string) {}

  async stats(): Promise<SandboxStats> {
    return (await this.call('GET', '/stats')) as SandboxStats;
  }

  async resetStats(): Promise<void> {
    await this.call('POST', '/stats/reset');
  }

  async events(service: ServiceName): Promise<SandboxEvent[]> {
    return (await this.call('GET', `/events/${service}`)) as SandboxEvent[];
  }

  async setRate(eventsPerSecond: number): Promise<void> {
    await this.call('POST', '/rate', { events_per_s: eventsPerSecond });
  }

  private async call(method: string, path: string, body?: object): Promise<unknown> {
    const url = `${this.controlUrl}${path}`;
    const res = await fetch(url, {
      method,
      signal: AbortSignal.timeout(60_000),
      ...(body ? { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } } : {}),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`sandbox control ${method} ${url} answered ${res.status}: ${text}`);
    return JSON.parse(text) as unknown;
  }
}

export interface ServiceCounts {
  /** Every request, 401s included. */
  requests: number;
  unauthorized: number;
  /** Authenticated feed pages and subject GETs, and the subject GETs that answered 404. */
  feedRequests: number;
  subjectRequests: number;
  subjectNotFound: number;
}

/** Requests the sandbox served for one service since the last reset. */
export function serviceCounts(stats: SandboxStats, service: ServiceName): ServiceCounts {
  const s = stats[service];
  const requests = Object.values(s.requests).reduce((a, b) => a + b, 0);
  return {
    requests: requests + s.unauthorized,
    unauthorized: s.unauthorized,
    feedRequests: s.requests.feed,
    subjectRequests: s.requests.subject,
    subjectNotFound: s.subject_not_found,
  };
}
