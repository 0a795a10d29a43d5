// Fault injection: decides, per authenticated request, whether to misbehave and how, and writes the
// misbehaviour (error statuses, a hang, a cut body, a broken body, an HTML error page).
import type { ServerResponse } from 'node:http';
import type { Body } from './http-io.js';
import { send, textBody } from './http-io.js';
import type { Rng } from './prng.js';
import type { FaultConfig, FaultKind, RequestKind } from './types.js';

export class FaultInjector {
  private cfg: Required<FaultConfig>;
  /** Responses held open by `hang` faults, ended when the sandbox closes. */
  private readonly hanging = new Set<ServerResponse>();

  constructor(
    private readonly rng: Rng,
    cfg: Required<FaultConfig>,
  ) {
    this.cfg = cfg;
  }

  configure(cfg: Required<FaultConfig>): void {
    this.cfg = cfg;
  }

  config(): Required<FaultConfig> {
    return { ...this.cfg, kinds: [...this.cfg.kinds] };
  }

  /** The fault to inject into a request of this kind, if any. */
  pick(kind: RequestKind): FaultKind | undefined {
    const { rate, kinds, paths } = this.cfg;
    if (rate <= 0) return undefined;
    if (paths !== 'all' && paths !== kind) return undefined;
    if (!this.rng.chance(rate)) return undefined;
    return this.rng.pick(kinds);
  }

  /**
   * Answers with the fault instead of `real` (the response the request deserved, used to cut or
   * break a genuine body). Returns the status sent, or undefined when none was (hang, truncation).
   */
  write(kind: FaultKind, res: ServerResponse, real: Body): number | undefined {
    switch (kind) {
      case 'status_500':
        send(res, textBody(500, 'Internal Server Error'));
        return 500;
      case 'status_503':
        send(res, textBody(503, 'Service Unavailable'));
        return 503;
      case 'status_429':
        send(res, textBody(429, 'Too Many Requests'));
        return 429;
      case 'status_429_retry_after':
        send(res, textBody(429, 'Too Many Requests', { 'retry-after': '1' }));
        return 429;
      case 'hang':
        this.hanging.add(res);
        res.on('close', () => this.hanging.delete(res));
        return undefined;
      case 'truncated': {
        // Promise the whole body, deliver half of it, then drop the connection.
        const body = substantial(real);
        res.writeHead(200, { ...body.headers, 'content-length': String(body.body.length) });
        res.write(body.body.subarray(0, Math.floor(body.body.length / 2)), () => res.destroy());
        return 200;
      }
      case 'malformed': {
        // A well-framed response whose content is cut mid-document: not parseable.
        const body = substantial(real);
        send(res, { ...body, status: 200, body: body.body.subarray(0, Math.floor(body.body.length * 0.6)) });
        return 200;
      }
      case 'html_200':
        send(res, {
          status: 200,
          headers: { 'content-type': 'text/html; charset=utf-8' },
          body: Buffer.from(HTML_ERROR_PAGE, 'utf8'),
        });
        return 200;
    }
  }

  /** Ends every response a `hang` fault is holding. */
  releaseHanging(): void {
    for (const res of this.hanging) res.destroy();
    this.hanging.clear();
  }
}

const HTML_ERROR_PAGE =
  '<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n' +
  '<body><h1>502 Bad Gateway</h1><p>The upstream server is temporarily unavailable.</p></body></html>\n';

/** The real body when it has content; else a plausible document of the same format to break. */
function substantial(real: Body): Body {
  if (real.body.length >= 40 && real.status === 200) return real;
  const json = (real.headers['content-type'] ?? '').includes('json');
  const text = json
    ? '{"resource_type":"events","entries":[{"resource_type":"event","id":1,"event_type":"title_created"}]}'
    : '<?xml version="1.0" encoding="UTF-8"?>\n<events type="array">\n  <event><id type="integer">1</id></event>\n</events>\n';
  return {
    status: 200,
    headers: { 'content-type': json ? 'application/json; charset=utf-8' : 'application/xml; charset=utf-8' },
    body: Buffer.from(text, 'utf8'),
  };
}
