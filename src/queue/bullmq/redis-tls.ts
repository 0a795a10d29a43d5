// queue.redis_tls → the node:tls options every Redis connection of the process uses (ioredis
// passes its `tls` option to tls.connect; BullMQ's duplicates copy it). The PEM files are read
// and checked once, at start, so a bad file is a ConfigError naming the key, not a TLS failure on
// every reconnect. `ca_file` REPLACES the system trust store for Redis, as it does for sources.
import { readFileSync } from 'node:fs';
import { createSecureContext, type ConnectionOptions } from 'node:tls';
import type { RedisTlsConfig } from '../../config/types.js';
import { ConfigError } from '../../core/errors.js';

const KEY = 'queue.redis_tls';

/** undefined: no settings (rediss:// then uses Node's default trust store, as before). */
export function redisTlsOptions(tls: RedisTlsConfig | undefined): ConnectionOptions | undefined {
  if (!tls) return undefined;
  if ((tls.cert_file === undefined) !== (tls.key_file === undefined)) {
    const missing = tls.cert_file === undefined ? 'cert_file' : 'key_file';
    throw new ConfigError(`${KEY}.${missing}`, 'cert_file and key_file go together');
  }
  const ca = tls.ca_file === undefined ? undefined : readPem('ca_file', tls.ca_file);
  const cert = tls.cert_file === undefined ? undefined : readPem('cert_file', tls.cert_file);
  const key = tls.key_file === undefined ? undefined : readPem('key_file', tls.key_file);
  // OpenSSL accepts a bundle without a single certificate in it, which would trust nothing.
  if (ca !== undefined && !ca.includes('-----BEGIN CERTIFICATE-----'))
    throw new ConfigError(`${KEY}.ca_file`, `${tls.ca_file} holds no PEM certificate`);
  try {
    if (ca !== undefined) createSecureContext({ ca });
  } catch (err) {
    throw new ConfigError(
      `${KEY}.ca_file`,
      `${tls.ca_file} is not a usable PEM CA bundle (${tlsError(err)})`,
    );
  }
  try {
    // The same check tls.connect would do, once, with the key file named.
    if (cert !== undefined) createSecureContext({ cert, key });
  } catch (err) {
    throw new ConfigError(
      `${KEY}.cert_file`,
      `${tls.cert_file} and ${tls.key_file} are not a usable PEM certificate and key (${tlsError(err)})`,
    );
  }
  return {
    ...(ca !== undefined && { ca }),
    ...(cert !== undefined && { cert, key }),
    ...(tls.servername !== undefined && { servername: tls.servername }),
    rejectUnauthorized: tls.reject_unauthorized,
  };
}

function readPem(key: string, path: string): string {
  try {
    return readFileSync(path, 'latin1');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    throw new ConfigError(`${KEY}.${key}`, `cannot read ${path} (${code})`);
  }
}

function tlsError(err: unknown): string {
  // OpenSSL messages name the problem, never the key material.
  return err instanceof Error ? err.message : String(err);
}
