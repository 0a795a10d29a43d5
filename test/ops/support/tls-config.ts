// The config the TLS process tests give feedsync: bullmq on `url` with queue.redis_tls, one jsonl
// sink `<name>.jsonl`, written into the PKI dir so `ca_file: ca.pem` and friends resolve there.
import { join } from 'node:path';
import type { Sandbox } from '../../../src/sandbox/index.js';
import { rawConfig } from '../../support/harness.js';
import type { Pki } from '../../upstream/support/pki.js';
import { writeConfig } from './cli.js';

/** The CA and client certificate createPki writes, as queue.redis_tls. */
export const CLIENT_TLS = { ca_file: 'ca.pem', cert_file: 'client.pem', key_file: 'client.key' };

export function writeTlsConfig(
  sandbox: Sandbox,
  pki: Pki,
  name: string,
  url: string,
  redisTls?: Record<string, unknown>,
): string {
  const raw = rawConfig(sandbox, pki.dir, {
    queue: { driver: 'bullmq', redis_url: url, prefix: name, ...(redisTls && { redis_tls: redisTls }) },
    sinks: [{ name: 'file', type: 'jsonl', path: join(pki.dir, `${name}.jsonl`) }],
  });
  raw.log = { level: 'info' };
  return writeConfig(pki.dir, raw, `${name}.yaml`);
}
